#!/bin/bash
#SBATCH --job-name=train
#SBATCH --gres=gpu:P4:1
#SBATCH --time=2-00:00
#SBATCH --output=%x_%j.out
echo hi

#!/bin/sh
#SBATCH -o job%4j.out -e err-%A_%a.log --requeue -H
# SBATCH --time=5

#!/bin/sh
#SBATCH -J "a b" -t 1:30 -G 3 --array=0-15:4%2 --signal=B:USR1@30
#SBATCH --dependency=afterok:4:5,afternotok:6 --mem=36000 -N 1

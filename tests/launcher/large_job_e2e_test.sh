#!/usr/bin/env bash
# End to end: a large Slurm job plans and prints its launch (--dry-run). 1,024 nodes of 8 GPUs
# were refused ("the rank table of 8192 ranks on 1024 nodes is 142000 bytes, more than one
# command-line argument carries"); the table now groups nodes alike (format 5).
#
#   tests/launcher/large_job_e2e_test.sh GPURUN [SRC_DIR]
set -euo pipefail
gpurun=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for nodes in 1024; do
  cat >"$work/big.env" <<ENV
SLURM_JOB_ID=99
SLURM_JOB_NODELIST=n[00001-$(printf '%05d' "$nodes")]
SLURM_TASKS_PER_NODE=8(x$nodes)
SLURM_NTASKS=$((nodes * 8))
SLURM_GPUS_ON_NODE=8
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
SLURM_CPUS_PER_TASK=4
ENV
  if ! out=$(timeout 60 "$gpurun" --env-file "$work/big.env" --dry-run python3 train.py 2>"$work/err"); then
    echo "FAIL: $nodes nodes x 8: gpurun --dry-run refused the job:"
    cat "$work/err"
    exit 1
  fi
  grep -q -- "--ntasks=$((nodes * 8))" <<<"$out" ||
    { echo "FAIL: $nodes nodes: no --ntasks=$((nodes * 8)) in the launch line:"; head -c 600 <<<"$out"; exit 1; }
  grep -q '"gpurun_rank_table":5' <<<"$out" ||
    { echo "FAIL: $nodes nodes: the rank table is not the grouped form (format 5)"; exit 1; }
  echo "ok: $nodes nodes x 8 GPUs ($((nodes * 8)) ranks) planned, the rank table in one argument"
done

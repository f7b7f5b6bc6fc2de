#!/usr/bin/env bash
# End to end: a large Slurm job plans and prints its launch (--dry-run). 1,024 nodes of 8 GPUs
# were refused ("the rank table of 8192 ranks on 1024 nodes is 142000 bytes, more than one
# command-line argument carries"); the table now groups nodes alike (format 5). TF_CONFIG lists
# every rank, so past about 7,000 ranks it is more than one environment variable holds (128 KiB:
# the program would not start): by default the plan leaves it out with a note; asked for with
# --contract, it is an error. 16,384 nodes (131,072 ranks, the size the README's control plane is
# measured at) plan in well under a second; the dry run shows the first 32 ranks and the last.
#
#   tests/launcher/large_job_e2e_test.sh GPURUN [SRC_DIR]
set -euo pipefail
gpurun=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for nodes in 1024 16384; do
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
  grep -q "^# note: TF_CONFIG for $((nodes * 8)) ranks would be about" <<<"$out" ||
    { echo "FAIL: $nodes nodes: no note that TF_CONFIG is left out"; exit 1; }
  ! grep -q '^TF_CONFIG=' <<<"$out" || { echo "FAIL: $nodes nodes: a rank still has TF_CONFIG"; exit 1; }
  grep -q "^# $((nodes * 8 - 33)) more ranks: as the others" <<<"$out" ||
    { echo "FAIL: $nodes nodes: no line for the ranks not shown"; exit 1; }
  shown=$(grep -c '^# rank ' <<<"$out")
  [[ $shown == 33 ]] || { echo "FAIL: $nodes nodes: the dry run showed $shown ranks, want 33"; exit 1; }
  echo "ok: $nodes nodes: TF_CONFIG left out with a note, 33 ranks shown"
  if timeout 60 "$gpurun" --env-file "$work/big.env" --contract torch,tf --dry-run python3 train.py \
    >/dev/null 2>"$work/err"; then
    echo "FAIL: $nodes nodes: --contract torch,tf was accepted"; exit 1
  fi
  grep -q -- "--contract tf: TF_CONFIG for $((nodes * 8)) ranks" "$work/err" ||
    { echo "FAIL: $nodes nodes: --contract tf's error:"; cat "$work/err"; exit 1; }
done
echo "ok: --contract tf on a plan too large for TF_CONFIG is an error naming it"

# Inside an srun step of that job, the dry run also shows this task's rank (5000 here).
sed -e 's/^SLURM_JOB_NODELIST=.*/SLURM_JOB_NODELIST=n[00001-01024]/' \
  -e 's/^SLURM_TASKS_PER_NODE=.*/SLURM_TASKS_PER_NODE=8(x1024)/' -e 's/^SLURM_NTASKS=.*/SLURM_NTASKS=8192/' \
  "$work/big.env" >"$work/step.env"
printf '%s\n' SLURM_STEP_ID=0 'SLURM_STEP_NODELIST=n[00001-01024]' 'SLURM_STEP_TASKS_PER_NODE=8(x1024)' \
  SLURM_STEP_NUM_TASKS=8192 SLURM_PROCID=5000 SLURM_LOCALID=0 SLURM_NODEID=625 SLURMD_NODENAME=n00626 \
  >>"$work/step.env"
"$gpurun" --env-file "$work/step.env" --dry-run python3 train.py 2>/dev/null | grep -q '^# rank 5000 on n00626$' ||
  { echo "FAIL: the step task's own rank (5000) is not shown"; exit 1; }
echo "ok: in a step, the dry run shows the task's own rank among the 8,192"

# A small job keeps TF_CONFIG.
printf 'SLURM_JOB_ID=9\nSLURM_JOB_NODELIST=n[1-2]\nSLURM_TASKS_PER_NODE=2(x2)\nSLURM_NTASKS=4\n' >"$work/small.env"
"$gpurun" --env-file "$work/small.env" --dry-run python3 train.py | grep -q '^TF_CONFIG=' ||
  { echo "FAIL: a 4-rank job lost TF_CONFIG"; exit 1; }
echo "ok: a 4-rank job keeps TF_CONFIG"

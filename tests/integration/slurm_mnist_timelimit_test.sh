#!/usr/bin/env bash
# slurm_mnist_timelimit_test.sh: gpurun checkpoints the ranks before the Slurm time limit
# (CTest: slurm_mnist_timelimit, labels slurm;e2e).
#
#   tests/integration/slurm_mnist_timelimit_test.sh GPURUN MNIST_CNN [DATA_DIR] [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here) it submits
# a 2 nodes x 2 tasks job with --time=1 (60 s) whose batch script execs
# `gpurun --checkpoint-before 45 -- mnist_cnn --epochs 500 --checkpoint DIR --resume`: gpurun reads
# the job's end time and sends the ranks SIGUSR1 about 15 s into the job; they checkpoint and exit.
# Slurm 22.05 does not export SLURM_JOB_END_TIME: gpurun then reads EndTime from scontrol.
# Checks: the job COMPLETED (not TIMEOUT) before its limit, the ranks reported SIGUSR1 and wrote the
# checkpoint. Exit 77 (skipped) without data.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_mnist_timelimit "$@"

"$cluster" start >/dev/null || fail "local-cluster.sh start"

cat >"$work/job.sh" <<EOF
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=2
#SBATCH --time=1
set -euo pipefail
# Slurm 22.05 (Debian 12) does not export SLURM_JOB_END_TIME (newer Slurm does); gpurun then asks
# scontrol for the job's EndTime.
echo "SLURM_JOB_END_TIME=\${SLURM_JOB_END_TIME:-unset}, now: \$(date +%s)"
exec "$gpurun" --checkpoint-before 45 -- "$mnist" --data "$data" --epochs 500 --threads 1 --lr 0.05 \\
  --device cpu --checkpoint "$work/ckpt" --resume
EOF

jobid=$(sbatch --parsable -D "$work" -o "$out" --job-name=gpurun-timelimit "$work/job.sh") || fail "sbatch"
echo "$name: submitted job $jobid (time limit 60 s, checkpoint 45 s before)"

deadline=$((SECONDS + 120))
st=""
while :; do
  st=$(scontrol show job "$jobid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
  case $st in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) break ;; esac
  ((SECONDS < deadline)) || fail "job $jobid still '$st' after 120 s"
  sleep 1
done
[[ $st == COMPLETED ]] || fail "job $jobid ended $st, expected COMPLETED after a checkpoint before the limit"
grep -q 'gpurun: [0-9]* s left in the job' "$out" || fail "gpurun did not find the job's end time"
grep -q 'gpurun: job time nearly over: sending SIGUSR1 to all ranks' "$out" ||
  fail "gpurun did not send SIGUSR1 before the time limit"
# Rank 0 names the signal when it got it itself, else "signal" (the stop reached it through the
# ranks' agreement first): either way the ranks stopped together at a step boundary.
grep -Eq 'received (SIGUSR1|signal): stopped at a step boundary' "$out" ||
  fail "the ranks did not stop at a step boundary after SIGUSR1"
grep -q 'checkpoint written' "$out" || fail "no checkpoint written"
[[ -n $(ls -A "$work/ckpt" 2>/dev/null) ]] || fail "checkpoint directory $work/ckpt is empty"
run=$(scontrol show job "$jobid" | grep -o 'RunTime=[0-9:]*' | cut -d= -f2)
echo "$name: PASS (job $jobid COMPLETED after $run with a checkpoint: $(grep -m1 -Eo 'received (SIGUSR1|signal)[^,]*' "$out"))"

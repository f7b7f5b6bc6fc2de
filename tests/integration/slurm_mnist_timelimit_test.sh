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

case ${1:-} in
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
(($# >= 2)) || { echo "usage: $0 GPURUN MNIST_CNN [DATA_DIR] [--keep]" >&2; exit 2; }
gpurun=$(realpath "$1")
mnist=$(realpath "$2")
shift 2
keep=0 data=""
for a in "$@"; do
  case $a in --keep) keep=1 ;; *) data=$a ;; esac
done

if [[ $(id -u) -ne 0 ]] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "$(basename "$0"): SKIP: needs root, slurm-wlm and munge (scripts/install-deps.sh)"
  exit 77
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$root/scripts/slurm/local-cluster.sh
dir=${GPURUN_SLURM_DIR:-/tmp/gpurun-slurm}
export SLURM_CONF=$dir/etc/slurm.conf
name=slurm_mnist_timelimit

if [[ -z $data ]]; then
  for d in "$root/data/mnist" "$root/data/fashion" /usr/share/datasets/fashion-mnist; do
    if compgen -G "$d/train-images-idx3-ubyte*" >/dev/null; then data=$d; break; fi
  done
fi
if [[ -z $data ]]; then echo "$name: SKIP: no MNIST data (run scripts/fetch-data.sh)"; exit 77; fi
data=$(realpath "$data")

work=$(mktemp -d /tmp/gpurun-timelimit.XXXXXX)
chmod 755 "$work"
out=$work/job.out
jobid=""

fail() {
  echo "$name: FAIL: $*" >&2
  if [[ -f $out ]]; then echo "--- job output ($out):" >&2; tail -n 40 "$out" >&2; fi
  if [[ -n $jobid ]]; then scontrol show job "$jobid" >&2 2>/dev/null || true; fi
  echo "$name: cluster logs in $dir/log" >&2
  exit 1
}
cleanup() {
  local rc=$?
  if ((keep == 0)); then
    "$cluster" stop >/dev/null || echo "$name: cluster stop failed" >&2
    rm -rf "$work"
  else
    echo "$name: kept the cluster and $work"
  fi
  exit $rc
}
trap cleanup EXIT

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
grep -q 'received SIGUSR1' "$out" || fail "the ranks did not report SIGUSR1 before the time limit"
grep -q 'checkpoint written' "$out" || fail "no checkpoint written"
[[ -n $(ls -A "$work/ckpt" 2>/dev/null) ]] || fail "checkpoint directory $work/ckpt is empty"
run=$(scontrol show job "$jobid" | grep -o 'RunTime=[0-9:]*' | cut -d= -f2)
echo "$name: PASS (job $jobid COMPLETED after $run with a checkpoint: $(grep -m1 -o 'received SIGUSR1[^,]*' "$out"))"

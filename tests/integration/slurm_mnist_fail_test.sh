#!/usr/bin/env bash
# slurm_mnist_fail_test.sh: a rank killed mid-run ends the Slurm job as failed, fast
# (CTest: slurm_mnist_fail, labels slurm;e2e).
#
#   tests/integration/slurm_mnist_fail_test.sh GPURUN MNIST_CNN [DATA_DIR] [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here) it submits
# scripts/slurm/mnist_cnn.sbatch for a long run on 2 nodes x 2 tasks, waits until training runs,
# SIGKILLs rank 2 (on node2), and checks that the job ends FAILED with a non-zero exit code within
# 30 s of the kill, and that a line of gpurun's names rank 2. Exit 77 (skipped) without data.
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
name=slurm_mnist_fail
victim=2

if [[ -z $data ]]; then
  for d in "$root/data/mnist" "$root/data/fashion" /usr/share/datasets/fashion-mnist; do
    if compgen -G "$d/train-images-idx3-ubyte*" >/dev/null; then data=$d; break; fi
  done
fi
if [[ -z $data ]]; then echo "$name: SKIP: no MNIST data (run scripts/fetch-data.sh)"; exit 77; fi
data=$(realpath "$data")

work=$(mktemp -d /tmp/gpurun-fail.XXXXXX)
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

job_state() { scontrol show job "$jobid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true; }
is_final() {
  case $1 in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;; esac
  return 1
}
# rank_pid RANK: the mnist_cnn process of this job with that RANK in its environment.
rank_pid() {
  local p env
  for p in $(pgrep -f -- "$mnist" || true); do
    env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
    if grep -qx "SLURM_JOB_ID=$jobid" <<<"$env" && grep -qx "RANK=$1" <<<"$env" &&
      [[ $(readlink "/proc/$p/exe" 2>/dev/null) == "$mnist" ]]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

"$cluster" start >/dev/null || fail "local-cluster.sh start"

jobid=$(cd "$root" && GPURUN=$gpurun MNIST_CNN=$mnist DATA=$data EPOCHS=200 DEVICE=cpu \
  CKPT_DIR=$work/ckpt REPORT=$work/report.json MNIST_ARGS="--threads 1 --lr 0.05" \
  sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=2 --gres=gpu:2 --time=10 \
  --job-name=gpurun-fail -o "$out" scripts/slurm/mnist_cnn.sbatch) || fail "sbatch"
echo "$name: submitted job $jobid"

# Wait (bounded) until training runs and rank $victim exists.
deadline=$((SECONDS + 120))
pid=""
until [[ -n $pid ]] && grep -q 'training:' "$out" 2>/dev/null; do
  st=$(job_state)
  ! is_final "$st" || fail "job $jobid ended $st before rank $victim could be killed"
  ((SECONDS < deadline)) || fail "job $jobid: training not running with a rank $victim after 120 s (state '$st')"
  sleep 0.5
  pid=$(rank_pid "$victim" || true)
done
sleep 1
kill -KILL "$pid" || fail "could not kill rank $victim (pid $pid)"
t0=$SECONDS
echo "$name: killed rank $victim (pid $pid)"

deadline=$((t0 + 60))
st=$(job_state)
until is_final "$st"; do
  ((SECONDS < deadline)) || fail "job $jobid still $st 60 s after rank $victim was killed"
  sleep 0.5
  st=$(job_state)
done
took=$((SECONDS - t0))
[[ $st == FAILED ]] || fail "job $jobid ended $st, expected FAILED"
((took <= 30)) || fail "job $jobid took ${took}s to end after the kill (limit 30 s)"
scontrol show job "$jobid" | grep -q 'ExitCode=0:0' && fail "job $jobid has exit code 0:0"
grep -Eq "^gpurun.*rank $victim([^0-9]|\$)" "$out" || fail "no gpurun line names rank $victim"
echo "$name: PASS (job $jobid FAILED ${took}s after the kill; $(grep -E "^gpurun.*rank $victim([^0-9]|\$)" "$out" | head -n 1))"

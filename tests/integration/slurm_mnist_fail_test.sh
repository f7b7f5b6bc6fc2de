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

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_mnist_fail "$@"
victim=2

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

st=$(wait_final 60)  # from the kill
took=$((SECONDS - t0))
[[ $st == FAILED ]] || fail "job $jobid ended $st, expected FAILED"
((took <= 30)) || fail "job $jobid took ${took}s to end after the kill (limit 30 s)"
scontrol show job "$jobid" | grep -q 'ExitCode=0:0' && fail "job $jobid has exit code 0:0"
grep -Eq "^gpurun.*rank $victim([^0-9]|\$)" "$out" || fail "no gpurun line names rank $victim"
echo "$name: PASS (job $jobid FAILED ${took}s after the kill; $(grep -E "^gpurun.*rank $victim([^0-9]|\$)" "$out" | head -n 1))"

#!/usr/bin/env bash
# slurm_cluster_test.sh: proves the local two-node Slurm cluster works (CTest: slurm_cluster, label slurm).
#
#   tests/integration/slurm_cluster_test.sh [--keep]
#
# Starts scripts/slurm/local-cluster.sh, sbatch-es a 2-node x 2-task job that runs `srun hostname` and
# prints its SLURM_* variables, waits (bounded) for it to finish, checks its output and what
# `scontrol show job` says, and stops the cluster, also on failure (--keep leaves it running).
# Needs root and Debian's slurm-wlm + munge. State: GPURUN_SLURM_DIR (default /tmp/gpurun-slurm).
set -euo pipefail

case ${1:-} in
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
keep=0
[[ ${1:-} == --keep ]] && keep=1

if [[ $(id -u) -ne 0 ]] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "$(basename "$0"): SKIP: needs root, slurm-wlm and munge (scripts/install-deps.sh)"
  exit 77
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$root/scripts/slurm/local-cluster.sh
dir=${GPURUN_SLURM_DIR:-/tmp/gpurun-slurm}
export SLURM_CONF=$dir/etc/slurm.conf
work=$(mktemp -d /tmp/gpurun-slurm-test.XXXXXX)
chmod 755 "$work"

fail() {
  echo "slurm_cluster_test: FAIL: $*" >&2
  if [[ -f $work/job.out ]]; then echo "--- $work/job.out" >&2; cat "$work/job.out" >&2; fi
  echo "slurm_cluster_test: cluster logs in $dir/log" >&2
  exit 1
}
cleanup() {
  local rc=$?
  if ((keep == 0)); then "$cluster" stop >/dev/null || echo "slurm_cluster_test: stop failed" >&2; fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT

"$cluster" start >/dev/null || fail "local-cluster.sh start"

cat >"$work/job.sh" <<'EOF'
#!/bin/bash
#SBATCH --job-name=gpurun-cluster-test
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:2
#SBATCH --time=2
set -euo pipefail
env | grep -E '^(SLURM_|CUDA_VISIBLE_DEVICES)' | sort | sed 's/^/env: /'
srun hostname | sed 's/^/hostname: /'
srun bash -c 'echo "task: $SLURM_PROCID node=$SLURMD_NODENAME local=$SLURM_LOCALID gpus=$CUDA_VISIBLE_DEVICES"'
echo done-ok
EOF

jobid=$(sbatch --parsable -D "$work" -o "$work/job.out" "$work/job.sh") || fail "sbatch"
[[ $jobid =~ ^[0-9]+$ ]] || fail "sbatch printed '$jobid', not a job id"

# Wait (bounded) for the job to leave the queue.
deadline=$((SECONDS + 90))
state=""
while :; do
  state=$(scontrol show job "$jobid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
  case $state in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) break ;;
  esac
  ((SECONDS < deadline)) || fail "job $jobid still '$state' after 90 s (squeue: $(squeue -h -j "$jobid" 2>&1))"
  sleep 0.5
done
[[ $state == COMPLETED ]] || fail "job $jobid ended $state"
scontrol show job "$jobid" | grep -q 'ExitCode=0:0' || fail "job $jobid exit code is not 0:0"
[[ -z $(squeue -h -j "$jobid" -t PD,R,CG 2>/dev/null) ]] || fail "squeue still lists job $jobid as active"

out=$work/job.out
grep -q '^done-ok$' "$out" || fail "the job script did not reach its end"
grep -q '^env: SLURM_JOB_NUM_NODES=2$' "$out" || fail "SLURM_JOB_NUM_NODES is not 2"
grep -q '^env: SLURM_NTASKS=4$' "$out" || fail "SLURM_NTASKS is not 4"
grep -q '^env: SLURM_JOB_NODELIST=node\[1-2\]$' "$out" || fail "SLURM_JOB_NODELIST is not node[1-2]"
grep -q '^env: SLURM_TASKS_PER_NODE=2(x2)$' "$out" || fail "SLURM_TASKS_PER_NODE is not 2(x2)"
grep -q '^env: SLURM_JOB_GPUS=0,1$' "$out" || fail "SLURM_JOB_GPUS is not 0,1 (fake GRES)"
[[ $(grep -c '^hostname: ' "$out") -eq 4 ]] || fail "srun hostname did not print 4 lines"
for t in 0 1 2 3; do
  n=$((t / 2 + 1))
  grep -Eq "^task: $t node=node$n local=$((t % 2)) gpus=0,1\$" "$out" ||
    fail "task $t did not run on node$n with local id $((t % 2)) and CUDA_VISIBLE_DEVICES=0,1"
done
if [[ -f $dir/log/jobcomp.txt ]]; then
  grep -q "JobId=$jobid .*JobState=COMPLETED" "$dir/log/jobcomp.txt" || fail "job $jobid missing from jobcomp.txt"
fi
echo "slurm_cluster_test: PASS (job $jobid on node[1-2], 4 tasks)"

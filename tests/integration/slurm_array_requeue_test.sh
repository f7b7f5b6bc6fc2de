#!/usr/bin/env bash
# slurm_array_requeue_test.sh: gpurun --requeue inside a Slurm job array requeues its own task only
# (CTest: slurm_array_requeue; issue 25, item 3).
#
#   tests/integration/slurm_array_requeue_test.sh GPURUN ANY_DIR [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here), a
# two-task array (--array=0-1) whose script reads $SLURM_ARRAY_TASK_ID and $SLURM_JOB_ID. The task
# whose SLURM_JOB_ID equals SLURM_ARRAY_JOB_ID (Slurm gives the array's own id to one task; for that
# task `scontrol requeue $SLURM_JOB_ID` requeued every task of the array) runs `gpurun --requeue`
# with a checkpoint signal due after 1 s; its rank exits 0 on it and gpurun requeues the task. The
# other task runs gpurun on a long program meanwhile: it must still be RUNNING, never restarted,
# after the first was requeued (Restarts=1). (slurm_test_lib.sh takes a program and a data folder
# after GPURUN; this test needs neither and passes /bin/true and ANY_DIR.) Exit 77 (skipped)
# without root, slurm-wlm or munge.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
gpurun_arg=$1
shift
slurm_test_setup slurm_array_requeue "$gpurun_arg" /bin/true "$@"

"$cluster" start >/dev/null || fail "local-cluster.sh start"
cat >"$work/array.sbatch" <<SCRIPT
#!/bin/bash
set -euo pipefail
echo "task \$SLURM_ARRAY_TASK_ID job \$SLURM_JOB_ID array \$SLURM_ARRAY_JOB_ID restarts \${SLURM_RESTART_COUNT:-0}"
if [[ \$SLURM_JOB_ID == "\$SLURM_ARRAY_JOB_ID" ]]; then
  [[ \${SLURM_RESTART_COUNT:-0} == 0 ]] || { echo "requeued task runs again"; exit 0; }
  exec "$gpurun" --requeue --time-left 3 --checkpoint-before 2 -- \\
    bash -c 'trap "echo checkpointed; exit 0" USR1; for i in \$(seq 600); do sleep 0.1; done; exit 1'
fi
exec "$gpurun" -- bash -c 'echo "other task running"; for i in \$(seq 1200); do sleep 0.1; done'
SCRIPT
jobid=$(cd "$work" && sbatch --parsable --array=0-1 --nodes=1 --ntasks=1 --cpus-per-task=1 --time=5 \
  --requeue --open-mode=append --job-name=gpurun-array -o "$work/task-%a.out" "$work/array.sbatch") ||
  fail "sbatch --array=0-1"
[[ $jobid =~ ^[0-9]+$ ]] || fail "sbatch printed '$jobid'"
echo "$name: submitted array job $jobid"

# Which task got the array's own job id (its requeue hit the whole array before).
deadline=$((SECONDS + 60))
self="" other=""
while [[ -z $self ]]; do
  for t in 0 1; do
    if grep -q "task $t job $jobid array $jobid" "$work/task-$t.out" 2>/dev/null; then
      self=$t other=$((1 - t))
    fi
  done
  ((SECONDS < deadline)) || fail "no task of array $jobid ran with job id $jobid within 60 s"
  sleep 0.2
done
out=$work/task-$self.out
deadline=$((SECONDS + 90))
until scontrol show job "${jobid}_$self" 2>/dev/null | grep -q 'Restarts=1'; do
  ((SECONDS < deadline)) || fail "task $self was not requeued within 90 s"
  sleep 0.5
done
sleep 2  # what a requeue of the whole array would do to the other task has happened by now
info=$(scontrol show job "${jobid}_$other")
out=$work/task-$other.out
grep -q 'JobState=RUNNING' <<<"$info" && grep -q 'Restarts=0' <<<"$info" ||
  fail "task $other was not left running: $(grep -o 'JobState=[A-Z_]*' <<<"$info") $(grep -o 'Restarts=[0-9]*' <<<"$info")"
grep -q "other task running" "$out" || fail "task $other's program did not run"
out=$work/task-$self.out
grep -q "gpurun: all ranks exited 0 after SIGUSR1 (checkpointed): requeueing array task ${jobid}_$self" "$out" ||
  fail "gpurun did not say it requeued array task ${jobid}_$self"
scancel "$jobid" || true
echo "$name: PASS (task $self requeued itself as ${jobid}_$self; task $other kept running)"

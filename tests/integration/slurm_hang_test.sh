#!/usr/bin/env bash
# slurm_hang_test.sh: a hung rank under Slurm (CTest: slurm_hang, labels slurm;e2e;integration).
#
#   tests/integration/slurm_hang_test.sh GPURUN BEAT_MPI [DATA_DIR] [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here), a batch
# job runs `gpurun --hang-timeout 5 --output-dir DIR -- beat_mpi` on 2 nodes x 2 tasks (srun is
# the engine): rank 2 (on node2) stops itself with SIGSTOP while the others wait for it in
# MPI_Allreduce. The job must end (exit code 124) within 15 s of the stop, the summary in the
# job's output must say rank 2 is behind, and DIR must hold a stack file for every rank.
# (slurm_test_lib.sh takes the program as its second argument, where the mnist tests pass
# mnist_cnn.) Exit 77 (skipped) without root, slurm-wlm, munge or data.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_hang "$@"
beat_mpi=$mnist
victim=2

# victim_stopped: rank $victim's beat_mpi of this job is in the stopped state.
victim_stopped() {
  local p env
  for p in $(pgrep -x beat_mpi || true); do
    env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
    grep -qx "SLURM_JOB_ID=$jobid" <<<"$env" && grep -qx "RANK=$victim" <<<"$env" || continue
    [[ $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) == T ]] && return 0
  done
  return 1
}

"$cluster" start >/dev/null || fail "local-cluster.sh start"
cat >"$work/hang.sbatch" <<EOF
#!/bin/bash
exec "$gpurun" --hang-timeout 5 --output-dir "$work/stacks" -- "$beat_mpi" --hang-rank $victim --hang-step 20 --hang stop
EOF
jobid=$(sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
  --job-name=gpurun-hang -o "$out" "$work/hang.sbatch") || fail "sbatch"
echo "$name: submitted job $jobid"

deadline=$((SECONDS + 120))
until victim_stopped; do
  st=$(job_state)
  ! is_final "$st" || fail "job $jobid ended $st before rank $victim stopped"
  ((SECONDS < deadline)) || fail "rank $victim of job $jobid not stopped after 120 s (state '$st')"
  sleep 0.2
done
t0=$SECONDS
echo "$name: rank $victim stopped itself"

st=$(job_state)
until is_final "$st"; do
  ((SECONDS < t0 + 60)) || fail "job $jobid still $st 60 s after rank $victim stopped"
  sleep 0.5
  st=$(job_state)
done
took=$((SECONDS - t0))
((took <= 15)) || fail "job $jobid took ${took}s to end after the stop (limit 15 s)"
scontrol show job "$jobid" | grep -q 'ExitCode=124:0' || fail "job $jobid's exit code is not 124"
grep -Eq "^gpurun: .*rank $victim in [a-z_]+: it is behind" "$out" || fail "the summary does not say rank $victim is behind"
grep -Eq "^gpurun: ranks 0-1,3 in MPI_Allreduce" "$out" || fail "the summary does not put ranks 0,1,3 in MPI_Allreduce"
for r in 0 1 2 3; do
  grep -q "^#0 " "$work/stacks/rank-$r.stack" 2>/dev/null || fail "no stack of rank $r in $work/stacks"
done
echo "$name: PASS (job $jobid $st ${took}s after the stop; $(grep 'it is behind' "$out" | head -n 1))"

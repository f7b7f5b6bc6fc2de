#!/usr/bin/env bash
# slurm_preflight_test.sh: gpurun --preflight across two Slurm nodes (CTest: slurm_preflight).
#
#   tests/integration/slurm_preflight_test.sh GPURUN SH FIXTURES_DIR [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here), batch
# jobs on 2 nodes x 2 tasks with 2 (fake) GPUs per node, srun the engine. There is no GPU here: the
# fake nvidia-smi FIXTURES_DIR/nvidia-smi/nvidia-smi-health-node2 stands in for the driver on both
# nodes and gives GPU 1 of node2 only 3 uncorrected ECC errors. Each rank's program writes a file.
#  1. default (--preflight fail): the job fails, gpurun names node2 with its reason in one line and
#     node1 in none, and no rank's program ran.
#  2. --preflight warn --preflight-bandwidth: node2 is named, the job runs all 4 programs, and
#     node2 reports a figure for its link to node1 (rank 0's node): the 8 MiB echo crossed nodes.
# (slurm_test_lib.sh takes the program as its second argument and a data directory as its third.)
# Exit 77 (skipped) without root, slurm-wlm or munge.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_preflight "$@"
sh_bin=$mnist fixture=$data/nvidia-smi/nvidia-smi-health-node2
[[ -x $fixture ]] || fail "no fixture $fixture"

"$cluster" start >/dev/null || fail "local-cluster.sh start"

# submit NAME GPURUN_OPTIONS...: a job whose ranks write $work/NAME/ran.RANK; waits for its end;
# sets jobid, out (its output) and st (its final state).
submit() {
  local job=$1
  shift
  mkdir -p "$work/$job"
  chmod 777 "$work/$job"
  out=$work/$job.out
  cat >"$work/$job.sbatch" <<EOS
#!/bin/bash
export GPURUN_NVIDIA_SMI=$fixture
exec "$gpurun" $* -- "$sh_bin" -c 'touch "\$0/ran.\$RANK"' "$work/$job"
EOS
  jobid=$(sbatch --parsable --nodes=2 --ntasks-per-node=2 --gres=gpu:2 --cpus-per-task=1 --time=5 \
    --job-name="gpurun-$job" -o "$out" "$work/$job.sbatch") || fail "sbatch $job"
  echo "$name: submitted $job as job $jobid"
  st=$(wait_final 120)
}
ran() { find "$work/$1" -name 'ran.*' | wc -l; }
line="gpurun: preflight: node node2: GPU 1 (rank 3): 3 uncorrected ECC errors since the driver loaded"

submit refuse
[[ $st == FAILED ]] || fail "job $jobid (default --preflight fail) ended $st, want FAILED"
grep -Fxq "$line" "$out" || fail "node2 is not named with its reason"
! grep -q "^gpurun: preflight: node node1: " "$out" || fail "node1 is named too"
grep -Fxq "gpurun: preflight failed on 1 of 2 nodes: no program started (--preflight warn starts anyway, --preflight off skips the checks)" \
  "$out" || fail "no refusal line"
[[ $(ran refuse) == 0 ]] || fail "$(ran refuse) programs ran after the refusal"
echo "$name: ok: refused, $line"

submit warn --preflight warn --preflight-bandwidth
[[ $st == COMPLETED ]] || fail "job $jobid (--preflight warn) ended $st"
grep -Fxq "$line" "$out" || fail "warn: node2 is not named"
[[ $(ran warn) == 4 ]] || fail "warn: $(ran warn) of 4 programs ran"
bw=$(grep -E "^gpurun: preflight: node node2: [0-9]+ MB/s to rank 0's node node1 \(8 MiB each way\)$" "$out") ||
  fail "no bandwidth figure for node2"
! grep -q "MB/s to rank 0's node node1" <(grep "node node1:" "$out") || fail "a figure for rank 0's own node"
echo "$name: PASS (warn ran 4 programs; $bw)"

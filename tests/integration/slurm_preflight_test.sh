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
#  3. --nnodes 1:2: node2 is named and left out; the job runs on node1 alone (srun
#     --exclude=node2): 2 programs, each with WORLD_SIZE 2 and GPURUN_RESTART_COUNT 0, COMPLETED,
#     and gpurun's final lines say node2 was left out and why.
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
exec "$gpurun" $* -- "$sh_bin" -c 'echo "\$WORLD_SIZE \$GPURUN_RESTART_COUNT \$SLURMD_NODENAME" >"\$0/ran.\$RANK"' "$work/$job"
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
echo "$name: ok: warn ran 4 programs; $bw"

submit nnodes --nnodes 1:2
[[ $st == COMPLETED ]] || fail "job $jobid (--nnodes 1:2) ended $st"
grep -Fxq "$line" "$out" || fail "nnodes: node2 is not named"
grep -Fxq "gpurun: preflight failed on 1 of 2 nodes: leaving it out (--nnodes 1:2)" "$out" ||
  fail "nnodes: no line that leaves node2 out"
grep -Fxq "gpurun: starting 2 ranks on the other 1 node, without node2 (--nnodes 1:2)" "$out" ||
  fail "nnodes: no line that starts on node1"
[[ $(ran nnodes) == 2 ]] || fail "nnodes: $(ran nnodes) programs ran, want 2"
for r in 0 1; do
  [[ $(cat "$work/nnodes/ran.$r") == "2 0 node1" ]] ||
    fail "nnodes: rank $r had WORLD_SIZE, GPURUN_RESTART_COUNT, node '$(cat "$work/nnodes/ran.$r")', want '2 0 node1'"
done
grep -Fxq "gpurun: --nnodes 1:2: node node2 was left out: failed its preflight: GPU 1 (rank 3): 3 uncorrected ECC errors since the driver loaded" \
  "$out" || fail "nnodes: no final line naming node2 and why"
grep -Fxq "gpurun: --nnodes 1:2: the last attempt ran on 1 of 2 nodes with WORLD_SIZE 2 (the first had 4)" "$out" ||
  fail "nnodes: no final line with the WORLD_SIZE"
echo "$name: PASS (refused; warn ran 4 programs; --nnodes 1:2 ran 2 on node1 without node2)"

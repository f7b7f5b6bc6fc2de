#!/usr/bin/env bash
# slurm_monitor_test.sh: gpurun --monitor across two Slurm nodes (CTest: slurm_monitor).
#
#   tests/integration/slurm_monitor_test.sh GPURUN SLEEP FIXTURES_DIR [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here), a batch
# job on 2 nodes x 2 tasks with 2 (fake) GPUs per node runs `gpurun --monitor=0.3 FILE.csv --
# SLEEP 2` (srun is the engine). There is no GPU here: the fake nvidia-smi
# FIXTURES_DIR/nvidia-smi/nvidia-smi-node-skew stands in for the driver on both nodes, and shows
# GPU 1 idle (5%) on node2 only. The samples travel from each node's local rank 0 over the control
# socket: FILE.csv must hold rows of node1 (ranks 0, 1) and node2 (ranks 2, 3), the job's output a
# summary line per node, and node2's GPU 1 (rank 3) named as the likely straggler.
# (slurm_test_lib.sh takes the program as its second argument and a data directory as its third,
# where the mnist tests pass mnist_cnn and the MNIST data.) Exit 77 (skipped) without root,
# slurm-wlm or munge.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_monitor "$@"
sleep_bin=$mnist fixture=$data/nvidia-smi/nvidia-smi-node-skew
[[ -x $fixture ]] || fail "no fixture $fixture"
csv=$work/monitor.csv

"$cluster" start >/dev/null || fail "local-cluster.sh start"
cat >"$work/monitor.sbatch" <<EOF
#!/bin/bash
export GPURUN_NVIDIA_SMI=$fixture
exec "$gpurun" --monitor=0.3 "$csv" -- "$sleep_bin" 2
EOF
jobid=$(sbatch --parsable --nodes=2 --ntasks-per-node=2 --gres=gpu:2 --cpus-per-task=1 --time=5 \
  --job-name=gpurun-monitor -o "$out" "$work/monitor.sbatch") || fail "sbatch"
echo "$name: submitted job $jobid"

st=$(wait_final 120)
[[ $st == COMPLETED ]] || fail "job $jobid ended $st"

python3 - "$csv" <<'PY' || fail "the CSV $csv"
import csv, collections, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert open(sys.argv[1]).readline().rstrip("\n") == "time,node,rank,gpu,util,mem_used_mib,power_w,temp_c"
seen = collections.defaultdict(set)
for r in rows:
    seen[r["node"]].add((r["gpu"], r["rank"], float(r["util"])))
want = {"node1": {("0", "0", 80.0), ("1", "1", 85.0)}, "node2": {("0", "2", 80.0), ("1", "3", 5.0)}}
assert dict(seen) == want, f"rows by node: {dict(seen)}, want {want}"
print(f"{len(rows)} rows from node1 and node2")
PY
grep -A1 "^gpurun: monitor: node1: " "$out" | grep -q "^gpurun: monitor: node2: " ||
  fail "the per-node lines are not in the plan's order (node1, then node2)"
for n in node1 node2; do
  grep -Eq "^gpurun: monitor: $n: GPU 0 \(rank [0-9]\) util mean 80% max 80%, mem mean 30000 MiB; GPU 1 " "$out" ||
    fail "no summary line for $n"
done
grep -Fxq "gpurun: monitor: likely straggler: node2 GPU 1 (rank 3): mean utilisation 5% is under half the job's median (80%)" "$out" ||
  fail "node2's GPU 1 is not named as the straggler"
[[ $(grep -c "likely straggler" "$out") == 1 ]] || fail "more than one straggler named"
echo "$name: PASS (job $jobid; $(grep 'likely straggler' "$out"))"

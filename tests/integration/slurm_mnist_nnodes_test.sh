#!/usr/bin/env bash
# slurm_mnist_nnodes_test.sh: a node dies mid-run; gpurun --nnodes 1:2 --max-restarts 1 goes on
# without it (CTest: slurm_mnist_nnodes, labels slurm;e2e).
#
#   tests/integration/slurm_mnist_nnodes_test.sh GPURUN MNIST_CNN [DATA_DIR] [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here), a batch
# job on 2 nodes x 2 tasks trains mnist_cnn (CPU) on a 4096-image slice of the data with a
# checkpoint each epoch. Once epoch 2 is checkpointed, node2 "dies": both of its ranks (2 and 3)
# are SIGKILLed at once (the node daemons share this host, so the node itself cannot go). Checks:
# gpurun leaves node2 out and restarts on node1 alone (srun --exclude=node2) with
# GPURUN_RESTART_COUNT=1 and WORLD_SIZE 2; mnist_cnn resumes from the checkpoint at the halved world
# size and completes; the job ends COMPLETED; gpurun's final lines say node2 was left out and why.
# Exit 77 (skipped) without data.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_mnist_nnodes "$@"
epochs=12

# A small slice of the data, so that epochs take seconds: the first 4096 training and 1024 test
# images and labels, in MNIST's IDX format.
python3 - "$data" "$work/data" <<'PY'
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
def read(name):
    for p in (os.path.join(src, name), os.path.join(src, name + ".gz")):
        if os.path.exists(p):
            return (gzip.open if p.endswith(".gz") else open)(p, "rb").read()
    raise SystemExit("no " + name + " in " + src)
for prefix, keep in (("train", 4096), ("t10k", 1024)):
    for kind, dims in (("images-idx3-ubyte", 3), ("labels-idx1-ubyte", 1)):
        raw = read(prefix + "-" + kind)
        shape = list(struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims]))
        item = 1
        for d in shape[1:]:
            item *= d
        shape[0] = keep
        body = raw[4 + 4 * dims:4 + 4 * dims + keep * item]
        open(os.path.join(dst, prefix + "-" + kind), "wb").write(raw[:4] + struct.pack(">" + "I" * dims, *shape) + body)
PY

# rank_pid RANK: the mnist_cnn process of this job with that RANK in its environment.
rank_pid() {
  local p env
  for p in $(pgrep -f -- "$mnist" || true); do
    env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
    if grep -qx "SLURM_JOB_ID=$jobid" <<<"$env" && grep -qx "RANK=$1" <<<"$env" &&
      grep -qx "GPURUN_RESTART_COUNT=0" <<<"$env" && [[ $(readlink "/proc/$p/exe" 2>/dev/null) == "$mnist" ]]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

"$cluster" start >/dev/null || fail "local-cluster.sh start"

mkdir -p "$work/ckpt"
cat >"$work/job.sbatch" <<EOS
#!/bin/bash
exec "$gpurun" --tag-output --nnodes 1:2 --max-restarts 1 --preflight off -- "$mnist" \
  --data "$work/data" --epochs $epochs --batch-size 64 --device cpu --threads 1 --lr 0.05 \
  --checkpoint "$work/ckpt" --resume --report "$work/report.json"
EOS
jobid=$(sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --gres=gpu:2 --time=10 \
  --job-name=gpurun-nnodes -o "$out" "$work/job.sbatch") || fail "sbatch"
echo "$name: submitted job $jobid"

# Wait (bounded) until epoch 2 is done (its checkpoint written) and node2's ranks exist.
deadline=$((SECONDS + 240))
p2="" p3=""
until [[ -n $p2 && -n $p3 ]] && grep -Eq "epoch 2/$epochs " "$out" 2>/dev/null; do
  st=$(job_state)
  ! is_final "$st" || fail "job $jobid ended $st before node2 could be killed"
  ((SECONDS < deadline)) || fail "job $jobid: no 'epoch 2/$epochs' line with ranks 2 and 3 after 240 s (state '$st')"
  sleep 0.3
  p2=$(rank_pid 2 || true) p3=$(rank_pid 3 || true)
done
grep -Eq "epoch $epochs/$epochs " "$out" && fail "training was over before node2 could be killed"
kill -KILL "$p2" "$p3" || fail "could not kill node2's ranks (pids $p2 $p3)"
echo "$name: killed node2's ranks 2 and 3 (pids $p2 $p3)"

# The next attempt: node1's ranks with WORLD_SIZE 2 and GPURUN_RESTART_COUNT 1 (bounded wait).
restarted_rank() {
  local p env
  for p in $(pgrep -f -- "$mnist" || true); do
    env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
    grep -qx "SLURM_JOB_ID=$jobid" <<<"$env" && grep -qx "RANK=$1" <<<"$env" &&
      grep -qx "WORLD_SIZE=2" <<<"$env" && grep -qx "GPURUN_RESTART_COUNT=1" <<<"$env" &&
      grep -qx "SLURMD_NODENAME=node1" <<<"$env" && return 0
  done
  return 1
}
deadline=$((SECONDS + 120))
until restarted_rank 0 && restarted_rank 1; do
  st=$(job_state)
  ! is_final "$st" || fail "job $jobid ended $st before ranks 0 and 1 ran on node1 with WORLD_SIZE=2 GPURUN_RESTART_COUNT=1"
  ((SECONDS < deadline)) || fail "no ranks 0 and 1 on node1 with WORLD_SIZE=2 GPURUN_RESTART_COUNT=1 after 120 s"
  sleep 0.2
done
echo "$name: ranks 0 and 1 run again on node1 with WORLD_SIZE=2 GPURUN_RESTART_COUNT=1"

st=$(wait_final 300)
[[ $st == COMPLETED ]] || fail "job $jobid ended $st, expected COMPLETED after the restart on node1"
grep -Eq "^gpurun: rank [23] on node2 was killed by signal 9 \(SIGKILL\) after [0-9.]+ s: restarting 2 ranks on the other 1 node, without node2 \(restart 1 of 1\)$" "$out" ||
  fail "no restart line that leaves node2 out"
grep -q 'resumed from' "$out" || fail "the restarted run did not resume from the checkpoint"
grep -q 'checkpoint was written with 4 ranks x 64; this run has 2 x 64' "$out" ||
  fail "mnist_cnn did not say it resumed at another world size"
grep -Eq "^gpurun: --nnodes 1:2: node node2 was left out: rank [23] was killed by signal 9 \(SIGKILL\) after [0-9.]+ s$" "$out" ||
  fail "no final line naming node2 and why"
grep -Fxq "gpurun: --nnodes 1:2: the last attempt ran on 1 of 2 nodes with WORLD_SIZE 2 (the first had 4)" "$out" ||
  fail "no final line with the halved WORLD_SIZE"
python3 - "$work/report.json" "$epochs" <<'PY' || fail "report: $(cat "$work/report.json" 2>/dev/null)"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["world_size"] == 2, j["world_size"]
assert j["resumed"], "not resumed"
assert j["epochs"] == int(sys.argv[2]), j["epochs"]
PY
echo "$name: PASS ($(grep -E '^gpurun: rank [23] on node2 was killed' "$out" | head -n 1); $(grep -F 'the last attempt ran' "$out"))"

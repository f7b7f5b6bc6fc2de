#!/usr/bin/env bash
# slurm_mnist_hierarchical_test.sh: the hierarchical allreduce (issue 31 item 3) on the local
# Slurm cluster's two nodes, 2 tasks each (CTest: slurm_mnist_hierarchical).
#
#   tests/integration/slurm_mnist_hierarchical_test.sh GPURUN MNIST_CNN [DATA_DIR] [--keep]
#
# One job runs mnist_cnn under gpurun twice, 20 steps from the same seed: --exchange allreduce,
# then --exchange hierarchical (the sum within each node, across one rank per node, back within
# each node; gpurun's NODE_RANK says which ranks share a node). The second says it saw 2 nodes,
# and both runs' parameters agree within 1e-5 (another order of additions: equal to rounding).
# CHECKPOINT_DIFF (the environment, else the build's tests/runtime/checkpoint_diff) compares them.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_mnist_hierarchical "$@"
ckdiff=${CHECKPOINT_DIFF:-$(dirname "$mnist")/../../tests/runtime/checkpoint_diff}
[[ -x $ckdiff ]] || fail "checkpoint_diff not found at $ckdiff (set CHECKPOINT_DIFF)"

"$cluster" start >/dev/null || fail "local-cluster.sh start"
cat > "$work/job.sh" <<JOB
#!/bin/bash
set -e
for ex in allreduce hierarchical; do
  "$gpurun" -- "$mnist" --device cpu --data "$data" --epochs 1 --max-steps 20 --threads 1 \\
    --seed 3 --lr 0.05 --exchange \$ex --checkpoint "$work/ckpt-\$ex"
done
JOB
jobid=$(sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=2 --time=10 \
  --job-name=gpurun-hier -o "$out" "$work/job.sh") || fail "sbatch"
state=$(wait_final "${GPURUN_E2E_TIMEOUT:-400}")
[[ $state == COMPLETED ]] || fail "job $jobid ended $state"
grep -Eq '^gpurun: .*4 ranks? on 2 nodes' "$out" || fail "gpurun did not run 4 ranks on 2 nodes"
grep -q 'cpu, allreduce$' "$out" || fail "the first run did not use the plain allreduce"
grep -q 'hierarchical allreduce (2 nodes)' "$out" || fail "the second run did not see 2 nodes"
"$ckdiff" "$work/ckpt-allreduce/checkpoint.bin" "$work/ckpt-hierarchical/checkpoint.bin" 1e-5 ||
  fail "the hierarchical run's parameters differ from the plain allreduce's by more than 1e-5"
echo "slurm_mnist_hierarchical: PASS"

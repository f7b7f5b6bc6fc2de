#!/usr/bin/env bash
# mnist_cnn_cuda_e2e.sh: mnist_cnn on the GPU as a user runs it, checked from its report JSON:
# --device cuda learns (test accuracy >= 0.85 after one epoch) and names the device "cuda:...";
# graph replay and --no-graph give the same loss; --device auto says it picked the GPU; with
# mpirun, two ranks (on one GPU: the host-staged allreduce) finish and agree. Exit 77 (skipped)
# without a usable CUDA device.
#   mnist_cnn_cuda_e2e.sh MNIST_CNN DATA_DIR [MPIEXEC]
set -euo pipefail
bin=$1
data=$2
mpiexec=${3:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/mnist-cuda-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
field() { $py -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

if ! "$bin" --device cuda --data "$data" --epochs 1 --report "$work/graph.json" \
  > "$work/graph.log" 2>&1; then
  if grep -q -e "no usable CUDA device" -e "built without CUDA" "$work/graph.log"; then
    echo "SKIPPED: no CUDA device ($(tail -1 "$work/graph.log"))"
    exit 77
  fi
  cat "$work/graph.log"
  exit 1
fi
cat "$work/graph.log"
dev=$(field "$work/graph.json" device)
acc=$(field "$work/graph.json" test_accuracy)
[[ $dev == cuda:* ]] || { echo "FAIL: report device is '$dev', expected cuda:<name>"; exit 1; }
$py -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.85 else 1)" "$acc" ||
  { echo "FAIL: test accuracy $acc < 0.85 after one epoch"; exit 1; }

"$bin" --device cuda --data "$data" --epochs 1 --no-graph --report "$work/eager.json" \
  > "$work/eager.log" 2>&1 || { cat "$work/eager.log"; exit 1; }
lg=$(field "$work/graph.json" final_loss)
le=$(field "$work/eager.json" final_loss)
[ "$lg" = "$le" ] || { echo "FAIL: graph final_loss $lg != --no-graph $le"; exit 1; }

"$bin" --device auto --data "$data" --epochs 1 --max-steps 20 > "$work/auto.log" 2>&1 ||
  { cat "$work/auto.log"; exit 1; }
grep -q "a CUDA device is present" "$work/auto.log" ||
  { cat "$work/auto.log"; echo "FAIL: --device auto did not pick the GPU"; exit 1; }

if [ -n "$mpiexec" ]; then
  "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -n 2 "$bin" --device cuda \
    --data "$data" --epochs 1 --report "$work/mpi2.json" > "$work/mpi2.log" 2>&1 ||
    { cat "$work/mpi2.log"; exit 1; }
  cat "$work/mpi2.log"
  [ "$(field "$work/mpi2.json" world_size)" = 2 ] || { echo "FAIL: world_size"; exit 1; }
  acc2=$(field "$work/mpi2.json" test_accuracy)
  $py -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.8 else 1)" "$acc2" ||
    { echo "FAIL: 2-rank test accuracy $acc2"; exit 1; }
fi
echo "PASS: $dev, test accuracy $acc, graph == eager loss $lg"

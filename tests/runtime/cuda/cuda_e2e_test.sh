#!/usr/bin/env bash
# cuda_e2e_test.sh: the training programs on the GPU as a user runs them, checked from their report
# JSON, in parts that CTest runs side by side (runtime_cuda_e2e_PART):
#   learn   mnist_cnn --device cuda learns (test accuracy >= 0.85 after one epoch) and names the
#           device "cuda:..."; --device auto picks the GPU
#   graph   graph replay and --no-graph give the same loss (cuDNN's heuristics in both)
#   lenet   lenet (pooling, flatten) learns on the GPU too
#   resume  a GPU checkpoint resumes on the CPU
#   mpi     with mpirun, two ranks (on one GPU: the host-staged allreduce) finish and agree
#           (needs MPIEXEC; CMake registers this part only in a build with MPI)
# Whether it runs is decided by the device probe's exit code (77: no usable device, skipped),
# never by what the programs print: once the probe finds a device, every failure fails.
#   cuda_e2e_test.sh PART CUDA_PROBE MNIST_CNN LENET DATA_DIR [MPIEXEC]
set -euo pipefail
part=$1 probe=$2 bin=$3 lenet=$4 data=$5 mpiexec=${6:-}
case $part in learn | graph | lenet | resume | mpi) ;;
  *)
    echo "cuda_e2e_test.sh: unknown part '$part' (expected learn, graph, lenet, resume or mpi)" >&2
    exit 2
    ;;
esac
"$probe" || exit $?
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-cuda-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Debian's python3 here; on the GPU machine (scripts/device-check.sh) whichever python3 it has.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
field() { $py -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
at_least() { $py -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" "$1" "$2"; }
run() {  # run NAME ARGS...: the program's output goes to $work/NAME.log, shown on failure
  local name=$1; shift
  local rc=0
  "$@" >"$work/$name.log" 2>&1 || rc=$?
  ((rc == 0)) || { cat "$work/$name.log"; fail "$name exited $rc"; }
}

learn() {
  run graph "$bin" --device cuda --data "$data" --epochs 1 --report "$work/graph.json"
  cat "$work/graph.log"
  local dev acc
  dev=$(field "$work/graph.json" device)
  acc=$(field "$work/graph.json" test_accuracy)
  [[ $dev == cuda:* ]] || fail "report device is '$dev', expected cuda:<name>"
  at_least "$acc" 0.85 || fail "mnist_cnn test accuracy $acc < 0.85 after one epoch"
  run auto "$bin" --device auto --data "$data" --epochs 1 --max-steps 20
  grep -q "a CUDA device is present" "$work/auto.log" || fail "--device auto did not pick the GPU"
  echo "PASS: $dev, mnist_cnn $acc; --device auto picks it"
}

# Bit for bit across two processes only with cuDNN's heuristics: benchmarking may pick another of
# two about equally fast algorithms in each process (conv2d.h). 200 steps: enough steps that
# graph replay and eager launches each run forward, backward and the update many times over.
graph() {
  run graph_h "$bin" --device cuda --data "$data" --epochs 1 --max-steps 200 \
    --conv-algo heuristic --report "$work/graph_h.json"
  run eager_h "$bin" --device cuda --data "$data" --epochs 1 --max-steps 200 \
    --conv-algo heuristic --no-graph --report "$work/eager_h.json"
  local lg le
  lg=$(field "$work/graph_h.json" final_loss)
  le=$(field "$work/eager_h.json" final_loss)
  [ "$lg" = "$le" ] || fail "graph final_loss $lg != --no-graph $le (both --conv-algo heuristic)"
  echo "PASS: graph == eager loss $lg"
}

lenet() {
  run lenet "$lenet" --device cuda --data "$data" --epochs 2 --report "$work/lenet.json"
  local lacc
  lacc=$(field "$work/lenet.json" test_accuracy)
  at_least "$lacc" 0.9 || fail "lenet test accuracy $lacc < 0.9 after two epochs on the GPU"
  echo "PASS: lenet $lacc"
}

# One checkpoint format: 60 steps on the GPU, the rest of the epoch on the CPU.
resume() {
  run ck_gpu "$bin" --device cuda --data "$data" --epochs 1 --max-steps 60 --checkpoint "$work/ck"
  run ck_cpu "$bin" --device cpu --data "$data" --epochs 1 --checkpoint "$work/ck" --resume \
    --report "$work/ck.json"
  grep -q "resumed from" "$work/ck_cpu.log" || fail "the CPU run did not resume the GPU checkpoint"
  at_least "$(field "$work/ck.json" test_accuracy)" 0.85 || fail "GPU->CPU resume did not learn"
  echo "PASS: a GPU checkpoint resumes on the CPU"
}

mpi() {
  [ -n "$mpiexec" ] || fail "the mpi part needs MPIEXEC"
  run mpi2 "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -n 2 "$bin" \
    --device cuda --data "$data" --epochs 1 --report "$work/mpi2.json"
  cat "$work/mpi2.log"
  [ "$(field "$work/mpi2.json" world_size)" = 2 ] || fail "world_size"
  at_least "$(field "$work/mpi2.json" test_accuracy)" 0.8 || fail "2-rank test accuracy"
  echo "PASS: two ranks on one GPU"
}

"$part"

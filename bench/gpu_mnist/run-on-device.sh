#!/usr/bin/env bash
# run-on-device.sh: everything issue 4 needs from a lent GPU machine, in ONE device run:
# configure + build with CUDA (sm_80/sm_90 plus the device's own arch), the GPU tests
# (ctest -L gpu), a short mnist_cnn --device cuda/auto smoke run, and the benchmark
# (bench/gpu_mnist/run.sh). Everything lands in $OUT (default ./device-out): build and test logs,
# nvidia-smi, the benchmark's gpu_mnist.{md,json} and raw files.
#
#   bench/gpu_mnist/run-on-device.sh            # from the repository root, e.g. through the
#                                               # session's device `run` tool
# Steps go on after a failure (each one's status is in $OUT/summary.txt); the exit status is
# non-zero if any failed. Budget: build ~3-5 min on 16 cores, tests ~2 min, benchmark ~3 min.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/device-out}
mkdir -p "$out"
build=${BUILD:-$root/build-device}
jobs=$(nproc 2>/dev/null || echo 8)
summary=$out/summary.txt
: > "$summary"
fail=0
step() {  # step NAME CMD...: run, log to $out/NAME.log, record the status
  local name=$1; shift
  local t0=$(date +%s)
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$summary"
  [ $rc -eq 0 ] || fail=1
  return $rc
}
cd "$root"
{ nvidia-smi; nvidia-smi -q | head -60; } > "$out/nvidia-smi.txt" 2>&1
export PATH=/usr/local/cuda/bin:$PATH
step configure cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPURUN_ENABLE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=80;90"
step build cmake --build "$build" -j "$jobs"
step ctest_gpu ctest --test-dir "$build" -L gpu --output-on-failure --timeout 600
# The whole kernel suite too (CPU twins included), for context.
step ctest_kernels ctest --test-dir "$build" -L kernels --output-on-failure --timeout 600
data=$root/data/fashion
step smoke_cuda "$build/examples/mnist_cnn/mnist_cnn" --device cuda --data "$data" --epochs 1 \
  --report "$out/smoke_cuda.json"
step smoke_auto "$build/examples/mnist_cnn/mnist_cnn" --device auto --data "$data" --epochs 1 \
  --max-steps 50
# Two ranks on the one GPU: NCCL 2.28 refuses that, so this exercises the host-staged fallback.
step smoke_mpi_2 mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 \
  "$build/examples/mnist_cnn/mnist_cnn" --device cuda --data "$data" --epochs 1 \
  --report "$out/smoke_mpi_2.json"
step bench "$root/bench/gpu_mnist/run.sh" --build "$build" --data "$data" --out "$out/bench"
cat "$summary"
exit $fail

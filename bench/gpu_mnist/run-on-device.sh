#!/usr/bin/env bash
# run-on-device.sh: everything issue 4 needs from a lent GPU machine, in ONE device run: the GPU
# tests, smoke runs of mnist_cnn --device cuda/auto, and the benchmark (bench/gpu_mnist/run.sh).
#
# Two ways, chosen automatically:
#  - bundle (normal case: the device image lacks Boost/fmt/GTest/OpenBLAS/MPI dev packages):
#    first, HERE: bench/gpu_mnist/make-device-bundle.sh; then the device `run` tool with
#      carry ["data/fashion", ".devbundle"], command "bench/gpu_mnist/run-on-device.sh",
#      timeout_s 600.
#    The prebuilt binaries run against the device's CUDA, cuDNN, NCCL and cuBLAS.
#  - build (when no bundle was carried): configure + build with CUDA there, then ctest -L gpu.
#
# At most 8 files come back from $OUT: summary.txt (every step's status and the key lines),
# gpu_mnist.md / gpu_mnist.json (the benchmark), logs.tar.gz (every log and raw file).
# Steps go on after a failure; the exit status is non-zero if any failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/device-out}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-device.XXXXXX")
logs=$work/logs
mkdir -p "$logs"
summary=$out/summary.txt
: > "$summary"
fail=0
step() {  # step NAME CMD...: run with a time limit, log to $logs/NAME.log, record the status
  local name=$1; shift
  local t0=$(date +%s)
  timeout "${STEP_TIMEOUT:-400}" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$summary"
  grep -E "PASSED|FAILED|SKIPPED|Failure|error|epoch [0-9]|watchdog|breakdown|note:" \
    "$logs/$name.log" | head -40 | sed 's/^/    /' >> "$summary"
  [ $rc -eq 0 ] || fail=1
  return $rc
}
finish() {
  cp "$work"/bench/gpu_mnist.md "$work"/bench/gpu_mnist.json "$out/" 2>/dev/null
  tar -C "$work" -czf "$out/logs.tar.gz" --exclude=./bundle . 2>/dev/null
  cat "$summary"
  exit $fail
}
cd "$root"
export PATH=/usr/local/cuda/bin:$PATH
{ nvidia-smi; echo; nvidia-smi -q | head -40; echo; which mpirun cmake ninja nvcc python3; } \
  > "$logs/machine.log" 2>&1
head -20 "$logs/machine.log" >> "$summary"
data=$root/data/fashion
[ -e "$data/train-images-idx3-ubyte.gz" ] || [ -e "$data/train-images-idx3-ubyte" ] ||
  echo "WARNING: no $data: carry data/fashion (30 MB) for the smoke runs and the benchmark" |
  tee -a "$summary"

if [ -f "$root/.devbundle/bundle.tar.xz" ]; then
  bundle=$work/bundle
  mkdir -p "$bundle"
  tar -C "$bundle" -xJf "$root/.devbundle/bundle.tar.xz"
  echo "bundle built from commit $(cat "$bundle/COMMIT")" | tee -a "$summary"
  # The device's CUDA libraries: the toolkit's, then PyTorch's nvidia-* wheels (cuDNN, NCCL).
  libpath=$bundle/lib:/usr/local/cuda/lib64
  for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for l in "$d"/nvidia/*/lib; do [ -d "$l" ] && libpath=$libpath:$l; done
  done
  export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  bin=$bundle/bin
  step ldd bash -c "ldd $bin/mnist_cnn $bin/gpu_watchdog_test | grep -E 'not found|cudnn|nccl|cublas|cudart'"
  for t in kernels_cuda_test nccl_allreduce_test gpu_train_test gpu_watchdog_test kernels_test; do
    step "$t" "$bin/$t" --gtest_output="xml:$logs/$t.xml"
  done
  mnist=$bin/mnist_cnn
else
  build=${BUILD:-$root/build-device}
  step configure cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGPURUN_ENABLE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=80;90"
  step build cmake --build "$build" -j "$(nproc)"
  step ctest_gpu ctest --test-dir "$build" -L gpu --output-on-failure --timeout 300
  mnist=$build/examples/mnist_cnn/mnist_cnn
  # Two ranks on the one GPU: NCCL 2.28 refuses that, so this exercises the host-staged path.
  command -v mpirun >/dev/null && step smoke_mpi_2 mpirun --allow-run-as-root --oversubscribe \
    --bind-to none -n 2 "$mnist" --device cuda --data "$data" --epochs 1
fi
# Issue 12: the GPU sampler reads real utilisation through NVML while mnist_cnn trains.
[ -x "${bin:-}/gpu_sampler_nvml_test" ] &&
  step gpu_sampler_nvml "$bin/gpu_sampler_nvml_test" "$mnist" --device cuda --data "$data" --epochs 1
step smoke_cuda "$mnist" --device cuda --data "$data" --epochs 1 --report "$logs/smoke_cuda.json"
step smoke_auto "$mnist" --device auto --data "$data" --epochs 1 --max-steps 50
step smoke_no_graph_tf32 "$mnist" --device cuda --data "$data" --epochs 1 --no-graph --tf32 \
  --breakdown
STEP_TIMEOUT=480 step bench "$root/bench/gpu_mnist/run.sh" --bin "$mnist" --data "$data" \
  --epochs 3 --compile-batches 256 --out "$work/bench"
finish

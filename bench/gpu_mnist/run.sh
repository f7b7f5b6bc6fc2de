#!/usr/bin/env bash
# run.sh: seconds per 60k-image epoch of `mnist_cnn --device cuda` on ONE GPU at batch 64, 256
# and 1024 (Fashion-MNIST, MNIST's size), FP32 (and TF32 with --with-tf32), against PyTorch on the
# same GPU and model (eager, and torch.compile) in the same run, with the ratio and a breakdown
# (kernels, allreduce, host) from a --breakdown run. Steady state = median of the epochs after the
# first (the first includes cuDNN's set-up, graph capture, torch.compile). Writes
# OUT/gpu_mnist.{md,json} (summarize.py) with the device, driver, CUDA, cuDNN, cuBLAS and NCCL
# versions, and every run's report under OUT/raw. A run that fails is recorded and the rest go on.
#
#   bench/gpu_mnist/run.sh [--build build | --bin PATH/mnist_cnn] [--data data/fashion]
#       [--epochs 8] [--torch-epochs 3] [--batches "64 256 1024"] [--compile-batches "256"]
#       [--with-tf32] [--out bench/results/gpu_mnist]
# scripts/device-check.sh runs it on a lent GPU machine. Exits 3 with a message when there is no
# GPU, 1 when a run failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
bin=
data=$root/data/fashion
epochs=8
torch_epochs=3
batches="64 256 1024"
compile_batches=""  # default: every batch; torch.compile costs about a minute per batch size
tf32=0
out=$root/bench/results/gpu_mnist
python=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --torch-epochs) torch_epochs=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --compile-batches) compile_batches=$2; shift 2 ;;
    --with-tf32) tf32=1; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run.sh: no GPU here (nvidia-smi finds none): this benchmark needs one CUDA device" >&2
  exit 3
fi
bin=${bin:-$build/examples/mnist_cnn/mnist_cnn}
if [ ! -x "$bin" ]; then
  echo "run.sh: $bin not found: configure and build with -DGPURUN_ENABLE_CUDA=ON first" >&2
  exit 2
fi
if [ ! -e "$data/train-images-idx3-ubyte.gz" ] && [ ! -e "$data/train-images-idx3-ubyte" ]; then
  echo "run.sh: no Fashion-MNIST in $data (scripts/fetch-data.sh, or --data DIR)" >&2
  exit 2
fi
raw=$out/raw
mkdir -p "$raw" || exit 2
# One GPU, one rank: the first visible device.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
failed=0

{
  echo "gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)"
  echo "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)"
  echo "torch=$($python -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' 2>/dev/null || echo none)"
  # What mnist_cnn itself loaded: driver CUDA, runtime, cuDNN, cuBLAS, NCCL.
  "$bin" --device cuda --data "$data" --epochs 1 --max-steps 1 2>&1 | sed -n 's/.*versions: /loaded=/p'
} >"$raw/versions.txt"
cat "$raw/versions.txt"

gpurun_run() {  # gpurun_run NAME ARGS...: one mnist_cnn run, its report in raw/NAME.json
  local name=$1; shift
  echo "== mnist_cnn $name"
  if ! "$bin" --device cuda --data "$data" "$@" --report "$raw/$name.json" >"$raw/$name.log" 2>&1; then
    tail -n 5 "$raw/$name.log"
    printf '{"error": "mnist_cnn exited non-zero: %s"}\n' "$(tail -n 1 "$raw/$name.log" | tr -d '"\\')" \
      >"$raw/$name.json"
    failed=1
  fi
  grep -E '^epoch [0-9]+/' "$raw/$name.log" | tail -n 1
}

for b in $batches; do
  gpurun_run "gpurun-b$b" --epochs "$epochs" --batch-size "$b"
  if ((tf32)); then gpurun_run "gpurun-tf32-b$b" --epochs "$epochs" --batch-size "$b" --tf32
  else echo '{"error": "not asked (--with-tf32)"}' >"$raw/gpurun-tf32-b$b.json"; fi
  gpurun_run "gpurun-nograph-b$b" --epochs 2 --batch-size "$b" --no-graph
  gpurun_run "gpurun-breakdown-b$b" --epochs 2 --batch-size "$b" --breakdown
  for mode in eager compile; do
    if [ "$mode" = compile ] && [ -n "$compile_batches" ] && [[ " $compile_batches " != *" $b "* ]]; then
      echo '{"error": "not asked at this batch (--compile-batches)"}' >"$raw/torch-$mode-b$b.json"
      continue
    fi
    echo "== pytorch $mode batch $b"
    $python "$here/torch_gpu_mnist.py" --data "$data" --batch-size "$b" --epochs "$torch_epochs" \
      --mode "$mode" >"$raw/torch-$mode-b$b.json" 2>"$raw/torch-$mode-b$b.log"
    cat "$raw/torch-$mode-b$b.json"
  done
done

$python "$here/summarize.py" "$raw" "$out" || failed=1
exit $failed

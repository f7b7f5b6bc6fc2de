#!/usr/bin/env bash
# run.sh: seconds per 60k-image epoch of `mnist_cnn --device cuda` on ONE GPU at batch 64, 256
# and 1024 (Fashion-MNIST, MNIST's size), against PyTorch on the same GPU and model (eager, and
# torch.compile where it works) in the same run, with the ratio and a breakdown (kernels,
# allreduce, host) from a --breakdown run. Steady state = median of the epochs after the first
# (the first includes cuDNN benchmarking, graph capture, torch.compile). Writes
# OUT/gpu_mnist.{md,json} with device, driver, CUDA, cuDNN and NCCL versions.
#
#   bench/gpu_mnist/run.sh [--build build-cuda | --bin PATH/mnist_cnn] [--data data/fashion]
#                          [--epochs 4] [--batches "64 256 1024"] [--compile-batches "256"]
#                          [--out bench/results/gpu_mnist]
# Exits 3 with a message when there is no GPU.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-cuda
bin=
data=$root/data/fashion
epochs=4
batches="64 256 1024"
compile_batches=""  # default: every batch; torch.compile costs ~a minute per batch size
out=$root/bench/results/gpu_mnist
python=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --compile-batches) compile_batches=$2; shift 2 ;;
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
mkdir -p "$out"
raw=$out/raw
mkdir -p "$raw"
# One GPU, one rank: the first visible device.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

inc=/usr/local/cuda/include
ver() { grep -m1 "#define $2 " "$inc/$1" 2>/dev/null | awk '{print $3}'; }
{
  echo "gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)"
  echo "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)"
  echo "cuda=$( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "cudnn=$(ver cudnn_version.h CUDNN_MAJOR).$(ver cudnn_version.h CUDNN_MINOR).$(ver cudnn_version.h CUDNN_PATCHLEVEL)"
  echo "nccl=$(ver nccl.h NCCL_MAJOR).$(ver nccl.h NCCL_MINOR).$(ver nccl.h NCCL_PATCH)"
  echo "torch=$($python -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo none)"
} > "$raw/versions.txt"
# What the program itself loaded (the headers above may be absent on a device image).
"$bin" --device cuda --data "$data" --epochs 1 --max-steps 1 2>&1 | sed -n 's/.*versions: /runtime=/p' >> "$raw/versions.txt" || true
cat "$raw/versions.txt"

for b in $batches; do
  echo "== gpurun batch $b"
  "$bin" --device cuda --data "$data" --epochs "$epochs" --batch-size "$b" \
    --report "$raw/gpurun-b$b.json" | tee "$raw/gpurun-b$b.log"
  "$bin" --device cuda --data "$data" --epochs 2 --batch-size "$b" --no-graph \
    --report "$raw/gpurun-nograph-b$b.json" > "$raw/gpurun-nograph-b$b.log"
  "$bin" --device cuda --data "$data" --epochs 2 --batch-size "$b" --breakdown \
    --report "$raw/gpurun-breakdown-b$b.json" > "$raw/gpurun-breakdown-b$b.log"
  for mode in eager compile; do
    if [ "$mode" = compile ] && [ -n "$compile_batches" ] && [[ " $compile_batches " != *" $b "* ]]; then
      echo '{"error": "torch.compile not run at this batch (--compile-batches)"}' > "$raw/torch-$mode-b$b.json"
      continue
    fi
    echo "== pytorch $mode batch $b"
    $python "$here/torch_gpu_mnist.py" --data "$data" --batch-size "$b" --epochs "$epochs" \
      --mode "$mode" > "$raw/torch-$mode-b$b.json" || true
    cat "$raw/torch-$mode-b$b.json"
  done
done

$python - "$raw" "$out" "$batches" <<'PY'
import json, os, re, statistics, sys
raw, out, batches = sys.argv[1], sys.argv[2], sys.argv[3].split()
vers = dict(l.strip().split("=", 1) for l in open(os.path.join(raw, "versions.txt")) if "=" in l)

def steady(xs):
    xs = list(xs)
    return statistics.median(xs[1:]) if len(xs) > 1 else (xs[0] if xs else None)

def load(name):
    p = os.path.join(raw, name)
    try:
        with open(p) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001
        return {"error": "%s: %s" % (name, e)}

def breakdown(b):
    try:
        text = open(os.path.join(raw, "gpurun-breakdown-b%s.log" % b)).read()
    except OSError:
        return None
    m = re.search(r"breakdown: kernels ([0-9.e+-]+) s, allreduce ([0-9.e+-]+) s, host ([0-9.e+-]+) s", text)
    return dict(zip(("kernels", "allreduce", "host"), map(float, m.groups()))) if m else None

rows, res = [], {"versions": vers, "batches": {}}
for b in batches:
    g = load("gpurun-b%s.json" % b)
    ng = load("gpurun-nograph-b%s.json" % b)
    te, tc = load("torch-eager-b%s.json" % b), load("torch-compile-b%s.json" % b)
    gs = steady(g.get("seconds_per_epoch", []))
    ngs = steady(ng.get("seconds_per_epoch", []))
    es = steady(te.get("seconds_per_epoch", [])) if "error" not in te else None
    cs = steady(tc.get("seconds_per_epoch", [])) if "error" not in tc else None
    bd = breakdown(b)
    res["batches"][b] = {"gpurun": g, "gpurun_no_graph": ng, "torch_eager": te,
                         "torch_compile": tc, "breakdown_2_epochs": bd,
                         "steady_seconds": {"gpurun": gs, "gpurun_no_graph": ngs,
                                            "torch_eager": es, "torch_compile": cs}}
    fmt = lambda v: "%.4f" % v if v else "n/a"
    ratio = lambda v: "%.1fx" % (v / gs) if v and gs else "n/a"
    rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        b, fmt(gs), fmt(ngs), fmt(es), ratio(es), fmt(cs), ratio(cs),
        "%.2f%%" % (100 * g["test_accuracy"]) if "test_accuracy" in g else "n/a",
        ("k %.3f / ar %.3f / host %.3f s" % (bd["kernels"], bd["allreduce"], bd["host"])) if bd else "n/a"))
    for name, r in (("torch eager", te), ("torch compile", tc)):
        if "error" in r:
            rows.append("|  | %s: %s |||||||" % (name, r["error"]))
md = ["# GPU MNIST CNN: seconds per 60k epoch, one GPU", "",
      "Device: %(gpu)s, driver %(driver)s, CUDA %(cuda)s, cuDNN %(cudnn)s, NCCL %(nccl)s (headers), PyTorch %(torch)s." % vers,
      "Loaded by mnist_cnn: %s." % vers.get("runtime", "n/a"),
      "Fashion-MNIST, FP32 (TF32 off on both sides), steady state = median of the epochs after the first.", "",
      "| batch | gpurun (graph) s | gpurun --no-graph s | torch eager s | eager/gpurun | torch.compile s | compile/gpurun | gpurun test acc | breakdown (2 epochs) |",
      "|---|---|---|---|---|---|---|---|---|"] + rows + [""]
open(os.path.join(out, "gpu_mnist.md"), "w").write("\n".join(md))
json.dump(res, open(os.path.join(out, "gpu_mnist.json"), "w"), indent=1)
print("\n".join(md))
print("written: %s/gpu_mnist.md, gpu_mnist.json" % out)
PY

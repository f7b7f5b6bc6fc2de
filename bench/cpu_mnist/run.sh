#!/usr/bin/env bash
# run.sh: CPU MNIST benchmark. In one run, on the same data, batch and thread count:
#   1. mnist_cnn, one process, 1 thread, batch 64        vs  PyTorch 1.13 (torch_mnist.py), same
#   2. mnist_cnn, one process, 2 threads                 (the single-process epoch time)
#   3. mnist_cnn, 2 ranks x 1 thread (mpirun)            vs  1 rank x 1 thread, with the default
#      gradient exchange (shared memory, the ranks being on one node) and with --exchange allreduce
# Prints training images/s (evaluation and start-up excluded on both sides) and the ratios as a
# markdown table, with the machine described.
#   bench/cpu_mnist/run.sh [--data data/fashion] [--bin build/examples/mnist_cnn/mnist_cnn]
#                          [--epochs 1] [--repeats 1]
# With --repeats R each configuration runs R times, interleaved, and the best run counts (other
# work on the machine only ever slows a run down).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
data=$root/data/fashion
bin=$root/build/examples/mnist_cnn/mnist_cnn
epochs=1
repeats=1
while (($#)); do
  case $1 in
    --data) data=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
[[ -x $bin ]] || { echo "run.sh: $bin not built (cmake --build build --target mnist_cnn)" >&2; exit 1; }
[[ -d $data ]] || { echo "run.sh: $data missing (scripts/fetch-data.sh)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
json() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
best() { "$py" -c "import sys; print(max(float(x) for x in sys.argv[1:]))" "$@"; }
ratio() { "$py" -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$1" "$2"; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
common=(--data "$data" --epochs "$epochs" --batch-size 64 --lr-scaling none)
ours1=() torch1=() ours2t=() ranks2=() ranks2a=() ours1c=() torch1c=()
cpu_rate() { "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['images']/r['train_cpu_seconds'])" "$1"; }
for ((r = 0; r < repeats; r++)); do
  "$bin" "${common[@]}" --threads 1 --report "$work/o1.json" >"$work/o1.log"
  ours1+=("$(json "$work/o1.json" images_per_second)")
  ours1c+=("$(cpu_rate "$work/o1.json")")
  OMP_NUM_THREADS=1 "$py" "$root/bench/cpu_mnist/torch_mnist.py" --data "$data" --threads 1 \
    --batch-size 64 --epochs "$epochs" >"$work/t1.json"
  torch1+=("$(json "$work/t1.json" images_per_second)")
  torch1c+=("$(cpu_rate "$work/t1.json")")
  "$bin" "${common[@]}" --threads 2 --report "$work/o2.json" >"$work/o2.log"
  ours2t+=("$(json "$work/o2.json" images_per_second)")
  mpirun --oversubscribe -n 2 --bind-to core "$bin" "${common[@]}" --threads 1 \
    --report "$work/r2.json" >"$work/r2.log"
  ranks2+=("$(json "$work/r2.json" images_per_second)")
  mpirun --oversubscribe -n 2 --bind-to core "$bin" "${common[@]}" --threads 1 \
    --exchange allreduce --report "$work/r2a.json" >"$work/r2a.log"
  ranks2a+=("$(json "$work/r2a.json" images_per_second)")
done
o1c=$(best "${ours1c[@]}") t1c=$(best "${torch1c[@]}")
o1=$(best "${ours1[@]}") t1=$(best "${torch1[@]}") o2=$(best "${ours2t[@]}") r2=$(best "${ranks2[@]}")
r2a=$(best "${ranks2a[@]}")
n=$(json "$work/o1.json" train_examples)
epoch() { "$py" -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$n" "$1"; }

echo "## CPU MNIST CNN: mnist_cnn vs PyTorch $("$py" -c 'import torch; print(torch.__version__)')"
echo
echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
echo "- data: $data ($n training images), batch 64 per rank, $epochs epoch(s), best of $repeats"
echo "- BLAS: mnist_cnn $(json "$work/o1.json" blas_core) kernels of $(json "$work/o1.json" blas | cut -d' ' -f1-2); PyTorch BLAS_INFO=$(json "$work/t1.json" blas); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "- load average before / after the run: $load_before / $(cut -d' ' -f1-3 /proc/loadavg) (other work slows runs; best of $repeats counts)"
share() { "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print('%.1f%%' % (100*r['allreduce_seconds']/r['train_seconds']))" "$1"; }
echo "- 2 ranks: exchange $(json "$work/r2.json" exchange), its share of the epoch $(share "$work/r2.json") (barriers and the small gradients' sum); with --exchange allreduce, the allreduce's share $(share "$work/r2a.json")"
echo
echo "| configuration | images/s | s per epoch | ratio |"
echo "|---|---:|---:|---|"
printf "| PyTorch, 1 process, 1 thread | %.0f | %s | 1.00 |\n" "$t1" "$(epoch "$t1")"
printf "| mnist_cnn, 1 process, 1 thread | %.0f | %s | %s x PyTorch |\n" "$o1" "$(epoch "$o1")" "$(ratio "$o1" "$t1")"
printf "| mnist_cnn, 1 process, 2 threads | %.0f | %s | %s x 1 thread |\n" "$o2" "$(epoch "$o2")" "$(ratio "$o2" "$o1")"
printf "| mnist_cnn, 2 ranks x 1 thread (mpirun), shared-memory exchange | %.0f | %s | %s x 1 rank |\n" "$r2" "$(epoch "$r2")" "$(ratio "$r2" "$o1")"
printf "| mnist_cnn, 2 ranks x 1 thread (mpirun), --exchange allreduce | %.0f | %s | %s x 1 rank |\n" "$r2a" "$(epoch "$r2a")" "$(ratio "$r2a" "$o1")"
echo
echo "Per CPU-second of the training loop (one thread, so this is the rate on a core of its own;"
echo "it discounts time the process waited for a core while other work ran):"
echo
echo "| configuration | images per CPU-second | ratio |"
echo "|---|---:|---|"
printf "| PyTorch, 1 thread | %.0f | 1.00 |\n" "$t1c"
printf "| mnist_cnn, 1 thread | %.0f | %s x PyTorch |\n" "$o1c" "$(ratio "$o1c" "$t1c")"

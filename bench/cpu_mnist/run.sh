#!/usr/bin/env bash
# run.sh: the CPU MNIST benchmark. In one run, on the same data, batch (64 per rank) and threads:
#   - PyTorch 1.13 (torch_mnist.py, Debian's python3-torch), 1 process, 1 thread: the peer;
#   - mnist_cnn, 1 process, 1 thread, once per CPU library (--cpu-kernels onednn|openblas|blis);
#   - mnist_cnn, 2 ranks x 1 thread (mpirun, default library), shared-memory exchange and
#     --exchange allreduce, against 1 rank; and 1 process x 2 threads at --batch-size 128 (64
#     images a thread, as a rank has);
#   - mnist_cnn, 1 process, 1 thread, default library, pinned to CPU 0 and to CPU 1 (the cores
#     the 2 ranks run on): on a VM the two can differ by a quarter, and 2 ranks can at most add
#     the two cores' speeds, so the 2-rank rows also say what share of that sum they reach;
# all of it with OPENBLAS_CORETYPE as the environment has it and, when it is set, again unset.
# Configurations run interleaved, --repeats times; the best run of each counts (other work on
# the machine only ever slows a run down). Prints a markdown report: images/s, images per
# CPU-second, the training step's GFLOP/s per core (17.4 MFLOP per image: notes/runtime.md) and
# its share of the core's peak, measured by fma_peak (packed FMAs at the core's clock), the load
# average before and after, and the ratios.
#   bench/cpu_mnist/run.sh [--data data/fashion] [--bin build/examples/mnist_cnn/mnist_cnn]
#                          [--peak build/bench/cpu_mnist/fma_peak] [--epochs 1] [--repeats 2]
#                          [--kernels "onednn openblas blis"]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
data=$root/data/fashion
bin=$root/build/examples/mnist_cnn/mnist_cnn
peak_bin=$root/build/bench/cpu_mnist/fma_peak
epochs=1
repeats=2
kernels="onednn openblas blis"
while (($#)); do
  case $1 in
    --data) data=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --peak) peak_bin=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
[[ -x $bin ]] || { echo "run.sh: $bin not built (cmake --build build --target mnist_cnn)" >&2; exit 1; }
[[ -x $peak_bin ]] || { echo "run.sh: $peak_bin not built (--target fma_peak)" >&2; exit 1; }
command -v taskset >/dev/null || { echo "run.sh: taskset missing (util-linux)" >&2; exit 1; }
(($(nproc) >= 2)) || { echo "run.sh: needs 2 CPUs (2 ranks), this machine has $(nproc)" >&2; exit 1; }
[[ -d $data ]] || { echo "run.sh: $data missing (scripts/fetch-data.sh)" >&2; exit 1; }
"$py" -c 'import torch' 2>/dev/null ||
  { echo "run.sh: PyTorch missing (scripts/install-deps.sh --bench)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# glibc hands blocks over 128 KiB back to the kernel on free, so PyTorch, which allocates its
# activations afresh each op, takes page faults every step; on VMs where a fault is dear (here,
# 2026-11-23: 640 against 3,500 images/s) that measures the VM, not PyTorch. Every configuration
# runs with glibc keeping blocks up to 32 MiB in the heap (mnist_cnn allocates nothing per step).
malloc_tunables=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
export GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}$malloc_tunables

# One configuration, once: NAME CMD... (a report JSON lands in $work/NAME.R.json).
run_one() {
  local name=$1 r=$2; shift 2
  "$@" --report "$work/$name.$r.json" >"$work/$name.$r.log" 2>&1 ||
    { cat "$work/$name.$r.log" >&2; echo "run.sh: $name failed" >&2; exit 1; }
}
torch_one() {
  OMP_NUM_THREADS=1 "$py" "$root/bench/cpu_mnist/torch_mnist.py" --data "$data" --threads 1 \
    --batch-size 64 --epochs "$epochs" >"$work/torch.$1.json"
}

# All configurations, interleaved, for one setting of OPENBLAS_CORETYPE.
measure() {
  local common=(--data "$data" --epochs "$epochs" --lr-scaling none --device cpu)
  local mpi=(mpirun --oversubscribe -n 2 --bind-to core)
  for ((r = 0; r < repeats; r++)); do
    torch_one "$r"
    for k in $kernels; do run_one "one_$k" "$r" "$bin" "${common[@]}" --batch-size 64 --threads 1 --cpu-kernels "$k"; done
    for cpu in 0 1; do
      run_one "pinned_cpu$cpu" "$r" taskset -c "$cpu" "$bin" "${common[@]}" --batch-size 64 --threads 1
    done
    run_one two_ranks "$r" "${mpi[@]}" "$bin" "${common[@]}" --batch-size 64 --threads 1
    run_one two_ranks_allreduce "$r" "${mpi[@]}" "$bin" "${common[@]}" --batch-size 64 --threads 1 --exchange allreduce
    # 128 images a step, 64 a thread: the ranks' batch per replica (at --batch-size 64 each
    # thread would take 32, and the fixed cost of a step would fall on half the images).
    run_one two_threads "$r" "$bin" "${common[@]}" --threads 2 --batch-size 128
  done
}

# The best of three: another process on the core only ever lowers it.
peak=$(for i in 1 2 3; do "$peak_bin"; done |
  "$py" -c "import json,sys; print(max(json.loads(l)['gflops'] for l in sys.stdin))")
report() {  # report TITLE: the tables for the runs in $work
  "$py" - "$work" "$repeats" "$peak" "$1" "$kernels" <<'PY'
import glob, json, os, sys
work, repeats, peak, title, kernels = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5].split()
MFLOP = 17.4  # per training image: forward 5.93 + backward 11.47 (ModelSpec::train_flops_per_example; bench/results/cpu_mnist.md)
def runs(name):
    out = []
    for p in sorted(glob.glob(os.path.join(work, name + ".*.json"))):
        with open(p) as f:
            text = f.read().strip()
        try:
            out.append(json.loads(text))  # mnist_cnn's report
        except ValueError:
            out.append(json.loads(text.splitlines()[-1]))  # torch_mnist.py's last line
    return out
def best(name, key="images_per_second"):
    rs = runs(name)
    return max(rs, key=lambda r: r[key]) if rs else None
def cpu_rate(r):
    return r["images"] / r["train_cpu_seconds"]
torch = best("torch")
rows = [("%s, 1 process, 1 thread" % torch.get("peer", "PyTorch"), torch, None)]
for k in kernels:
    r = best("one_" + k)
    if r: rows.append(("mnist_cnn, 1 thread, %s" % r.get("cpu_kernels", k), r, torch))
for cpu in (0, 1):
    r = best("pinned_cpu%d" % cpu)
    if r: rows.append(("mnist_cnn, 1 thread, %s, pinned to CPU %d" % (r.get("cpu_kernels", "default"), cpu), r, torch))
print("### %s" % title)
print()
print("| configuration | images/s | images per CPU-s | GFLOP/s per core | share of peak | ratio |")
print("|---|---:|---:|---:|---:|---|")
for name, r, base in rows:
    c = cpu_rate(r)
    g = c * MFLOP / 1000
    ratio = "%.2fx PyTorch" % (r["images_per_second"] / base["images_per_second"]) if base else "1.00"
    print("| %s | %.0f | %.0f | %.1f | %.0f%% | %s |" % (name, r["images_per_second"], c, g, 100 * g / peak, ratio))
one = best("one_" + kernels[0])
for name, label in (("two_ranks", "2 ranks x 1 thread, %s exchange"), ("two_ranks_allreduce", "2 ranks x 1 thread, %s exchange"),
                    ("two_threads", "1 process x 2 threads, 64 images each")):
    r = best(name)
    if not r: continue
    share = 100 * r["allreduce_seconds"] / r["train_seconds"] if r["train_seconds"] else 0
    lab = label % r["exchange"] if "%s" in label else label
    print("| %s (exchange %.1f%% of the epoch) | %.0f | | %.1f | %.0f%% | %.2fx 1 rank |" % (
        lab, share, r["images_per_second"], r["images_per_second"] / 2 * MFLOP / 1000,
        100 * r["images_per_second"] / 2 * MFLOP / 1000 / peak, r["images_per_second"] / one["images_per_second"]))
print()
cores = [best("pinned_cpu%d" % cpu) for cpu in (0, 1)]
if all(cores):
    both = sum(c["images_per_second"] for c in cores)
    print("CPU 0 and CPU 1 alone, added: %.0f images/s (%.2fx the unpinned 1-rank run). Two ranks can reach at most that sum; they reached %s of it." % (
        both, both / one["images_per_second"],
        ", ".join("%.0f%% (%s)" % (100 * best(n)["images_per_second"] / both, n.replace("_", " ")) for n in ("two_ranks", "two_ranks_allreduce", "two_threads") if best(n))))
    print()
names = sorted({os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(work, "*.json"))})
print("Every run, images/s: " + "; ".join(
    "%s %s" % (n, ", ".join("%.0f" % r["images_per_second"] for r in runs(n))) for n in names))
PY
}

echo "## CPU MNIST CNN: mnist_cnn vs PyTorch $("$py" -c 'import torch; print(torch.__version__)'), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; commit $(git -C "$root" rev-parse --short HEAD)"
echo "- data: $data, batch 64 per rank, $epochs epoch(s), best of $repeats interleaved runs"
echo "- every run: GLIBC_TUNABLES=$GLIBC_TUNABLES (see the script: PyTorch's per-op buffers stay in the heap)"
echo "- core peak: $peak GFLOP/s single precision, measured by fma_peak (16 chains of packed FMAs, 2 FLOP each, at the core's clock as it runs now)"
echo "- the step: 17.4 MFLOP per image (forward 5.93, backward 11.47); GFLOP/s per core = images per CPU-second x 17.4 MFLOP (2 ranks: images/s / 2)"
env_coretype=${OPENBLAS_CORETYPE-}
settings=("${env_coretype:-unset}")
[[ -n $env_coretype ]] && settings+=(unset)
for setting in "${settings[@]}"; do
  rm -f "$work"/*.json "$work"/*.log
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  if [[ $setting == unset ]]; then
    (unset OPENBLAS_CORETYPE; measure)
  else
    OPENBLAS_CORETYPE=$setting measure
  fi
  echo
  report "OPENBLAS_CORETYPE=$setting; load average before / after: $load_before / $(cut -d' ' -f1-3 /proc/loadavg)"
done

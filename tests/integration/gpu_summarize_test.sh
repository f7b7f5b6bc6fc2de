#!/usr/bin/env bash
# gpu_summarize_test.sh: bench/gpu_mnist/summarize.py, which first runs for real on a lent GPU
# machine, checked here on real mnist_cnn reports (CTest: gpu_summarize; labels scripts;device).
#
#   tests/integration/gpu_summarize_test.sh MNIST_CNN DATA_DIR SUMMARIZE_PY
#
# A 2-epoch CPU run of mnist_cnn stands in for the FP32 run at batch 128 in a raw/ folder laid out
# as bench/gpu_mnist/run.sh lays it out (the other runs marked "not asked", the GPU named an H100
# in versions.txt). The table must hold that run's steady seconds (the second epoch's), its
# images/s and its TFLOP/s worked out here from the report's fields, with the share of the
# 60 TFLOP/s FP32 peak named for an H100; with nothing asked missing, summarize.py exits 0. When
# the FP32 run died before its report, it must exit 1, name the run and show its log's last line.
# A report of a run on the CUDA stand-in is refused (exit 2, nothing written).
set -euo pipefail
bin=$1 data=$2 summarize=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-summarize.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "gpu_summarize: FAIL: $*" >&2; exit 1; }
raw=$work/raw
mkdir -p "$raw"

"$bin" --device cpu --data "$data" --epochs 2 --batch-size 128 --threads 1 \
  --report "$raw/gpurun-b128.json" >"$work/run.log" 2>&1 || { cat "$work/run.log"; fail "mnist_cnn"; }
for k in gpurun-tf32 gpurun-nograph torch-eager torch-compile; do
  echo '{"error": "not asked (test)"}' >"$raw/$k-b128.json"
done
printf 'gpu=NVIDIA H100 80GB HBM3\ndriver=580.00\n' >"$raw/versions.txt"

python3 "$summarize" "$raw" "$work/out" >"$work/sum.log" 2>&1 || { cat "$work/sum.log"; fail "summarize.py exited $?"; }
want=$(python3 - "$raw/gpurun-b128.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["seconds_per_epoch"][1]
t = r["train_flops_per_example"] * r["steps_per_epoch"] * r["global_batch"] / s / 1e12
print("| 128 | %.4f | %.0f | %.1f (%.0f%%) |" % (s, r["train_examples"] / s, t, 100 * t / 60))
PY
)
grep -qF "$want" "$work/out/gpu_mnist.md" || { cat "$work/out/gpu_mnist.md"; fail "no row starting '$want'"; }
grep -q "17.4 MFLOP per image" "$work/out/gpu_mnist.md" || fail "the step's FLOP per image not named"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['peaks_tflops_fp32_tf32'] == [60.0, 400.0], d" \
  "$work/out/gpu_mnist.json" || fail "gpu_mnist.json lacks the H100 peaks"

# The FP32 run died before its report (run.sh leaves the empty report and the program's log).
: >"$raw/gpurun-b128.json"
echo "mnist_cnn: cuDNN error CUDNN_STATUS_EXECUTION_FAILED (test)" >"$raw/gpurun-b128.log"
rc=0
python3 "$summarize" "$raw" "$work/out2" >"$work/sum2.log" 2>&1 || rc=$?
((rc == 1)) || { cat "$work/sum2.log"; fail "summarize.py exited $rc without the FP32 run, expected 1"; }
grep -q "no figure for gpurun at 128" "$work/sum2.log" || { cat "$work/sum2.log"; fail "the missing run is not named"; }
grep -q "gpurun: mnist_cnn: cuDNN error CUDNN_STATUS_EXECUTION_FAILED" "$work/out2/gpu_mnist.md" ||
  { cat "$work/out2/gpu_mnist.md"; fail "the failed run's last log line is not in the table"; }
echo "gpu_summarize: ok: $want"

# A run on the CUDA stand-in is never a GPU measurement: refused, nothing written.
python3 - "$raw/gpurun-b128.json" <<'PY'
import json, sys
json.dump({"device": "cuda:NVIDIA H100 80GB HBM3 (gpurun CUDA stand-in)", "seconds_per_epoch": [1, 1]},
          open(sys.argv[1], "w"))
PY
rc=0
python3 "$summarize" "$raw" "$work/out3" >"$work/sum3.log" 2>&1 || rc=$?
((rc == 2)) || { cat "$work/sum3.log"; fail "summarize.py exited $rc on a stand-in report, expected 2"; }
grep -q "ran on the CUDA stand-in, which is not a GPU" "$work/sum3.log" || fail "the refusal does not say why"
[[ ! -e $work/out3/gpu_mnist.md ]] || fail "a table was written from a stand-in run"

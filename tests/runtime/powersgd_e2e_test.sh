#!/usr/bin/env bash
# PowerSGD end to end (issue 31 item 4): mnist_cnn on 2 ranks under gpurun, 4 epochs on the MNIST
# digits, with --grad-compression powersgd:4, acp:4 (alternating PowerSGD) and without,
# same seed. Each compressed run sends under 5% of the bytes a step (acp about half PowerSGD's)
# and its test accuracy is within 1.5 points of the uncompressed run's (all runs are
# deterministic: one BLAS thread, a fixed seed, a 2-rank sum). At 2 epochs (about 81%) a change
# of rounding alone moved the compressed run by 1.5 points; at 4 (about 94.5%) the runs are past
# that early noise. The 8-epoch Fashion-MNIST comparison is bench/results/powersgd.md. The three
# ways PowerSGD gets its gradient agree, for each kind (below). Bad values and the shared
# exchange are refused by name.
#   powersgd_e2e_test.sh MNIST_CNN GPURUN DATA_DIR
set -euo pipefail
mnist=$1 gpurun=$2 data=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-powersgd.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {  # run NAME COMPRESSION
  "$gpurun" -q -n 2 -- "$mnist" --device cpu --data "$data" --epochs 4 --batch-size 64 \
    --threads 1 --exchange allreduce --seed 7 --grad-compression "$2" --report "$work/$1.json" \
    > "$work/$1.log" 2>&1 || { cat "$work/$1.log"; fail "the $1 run failed"; }
}
run plain none
run psgd powersgd:4
run acp acp:4
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
plain, psgd, acp = (json.load(open(f"{w}/{n}.json")) for n in ("plain", "psgd", "acp"))
assert plain["exchange"] == "allreduce" and psgd["exchange"] == "powersgd", (plain["exchange"], psgd["exchange"])
assert acp["exchange"] == "acp-sgd" and acp["grad_compression"] == "acp:4", (acp["exchange"], acp["grad_compression"])
epochs = [l for l in open(f"{w}/acp.log") if l.startswith("epoch ")]
assert epochs and all(" acp-sgd " in l and "powersgd" not in l for l in epochs), epochs
assert plain["exchange_bytes_per_step"] >= plain["gradient_bytes"], plain["exchange_bytes_per_step"]
for name, run in (("powersgd:4", psgd), ("acp:4", acp)):
    ratio = run["exchange_bytes_per_step"] / plain["exchange_bytes_per_step"]
    gap = 100 * (plain["test_accuracy"] - run["test_accuracy"])
    print(f"{name}: bytes a step {plain['exchange_bytes_per_step']:.0f} -> {run['exchange_bytes_per_step']:.0f} "
          f"({100 * ratio:.1f}%); test accuracy {100 * plain['test_accuracy']:.2f}% -> "
          f"{100 * run['test_accuracy']:.2f}%")
    assert 0 < ratio < 0.05, ratio
    assert run["test_accuracy"] > 0.9, run["test_accuracy"]
    assert abs(gap) <= 1.5, gap
# acp sends P one step and Q the next, with the rest each time: the mean is about half
half = acp["exchange_bytes_per_step"] / psgd["exchange_bytes_per_step"]
assert 0.45 < half < 0.7, half
PY
grep -q "PowerSGD rank 4: 2 matrices" "$work/psgd.log" || fail "no PowerSGD summary: $(cat "$work/psgd.log")"
grep -q "alternating PowerSGD (ACP-SGD) rank 4: 2 matrices" "$work/acp.log" ||
  fail "no ACP-SGD summary: $(cat "$work/acp.log")"
# PowerSGD's three ways in (runtime/src/cpu/exchange_allreduce.cc): one model forms dW a piece at
# a time into M (deferred), --micro-batch 32 adds E on the last micro-batch's blocks of dW rows
# (rows_final), --threads 2 (two replicas of 32 images) leaves it all to the exchange. The last
# two sum the same partial gradients in the same order: the same bits. The deferred form sums
# P's dot products a piece at a time: within rounding of them after 30 steps.
form() {  # form NAME COMPRESSION ARGS...
  local name=$1 compression=$2; shift 2
  "$gpurun" -q -n 2 -- "$mnist" --device cpu --data "$data" --batch-size 64 --exchange allreduce \
    --seed 7 --grad-compression "$compression" --max-steps 30 --report "$work/$name.json" "$@" \
    > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "the $name run failed"; }
}
for c in powersgd:4 acp:4; do
  form deferred $c --threads 1
  form micro $c --threads 1 --micro-batch 32
  form replicas $c --threads 2
  python3 - "$work" "$c" <<'PY'
import json, sys
w = sys.argv[1]
d, m, r = (json.load(open(f"{w}/{n}.json")) for n in ("deferred", "micro", "replicas"))
print(f"{sys.argv[2]}, 30 steps: final loss deferred {d['final_loss']:.6f}, micro-batch "
      f"{m['final_loss']:.6f}, replicas {r['final_loss']:.6f}")
assert d["grad_compression"] == m["grad_compression"] == r["grad_compression"] == sys.argv[2]
assert m["param_checksum"] == r["param_checksum"], (m["param_checksum"], r["param_checksum"])
assert d["steps_run"] == m["steps_run"] == 30, (d["steps_run"], m["steps_run"])
assert abs(d["final_loss"] - m["final_loss"]) <= 1e-3 * m["final_loss"], (d["final_loss"], m["final_loss"])
PY
done
for bad in powersgd:0 powersgd:x topk:4 powersgd:65 acp:0 acp: acp:65 acp:4x \
  powersgd:4:acp acp::4; do
  if "$mnist" --device cpu --data "$data" --grad-compression "$bad" > "$work/bad" 2>&1; then
    fail "--grad-compression $bad was accepted"
  fi
  grep -q -- "--grad-compression must be none, powersgd:R or acp:R" "$work/bad" || fail "$bad: $(cat "$work/bad")"
done
# The GPU path has no compression: asked for it, mnist_cnn refuses before it looks for a GPU.
for c in powersgd:4 acp:2; do
  if "$mnist" --device cuda --data "$data" --grad-compression $c --max-steps 1 > "$work/gpu" 2>&1
  then
    fail "--device cuda --grad-compression $c was accepted"
  fi
  grep -q "grad-compression powersgd or acp is the CPU path's" "$work/gpu" ||
    fail "cuda, $c: $(cat "$work/gpu")"
done
for c in powersgd:4 acp:4; do
  if "$gpurun" -q -n 2 -- "$mnist" --device cpu --data "$data" --exchange shared \
    --grad-compression $c --max-steps 2 > "$work/shared" 2>&1; then
    fail "$c with the shared exchange was accepted"
  fi
  grep -q "the shared exchange sends none" "$work/shared" || fail "shared, $c: $(cat "$work/shared")"
done
echo PASS

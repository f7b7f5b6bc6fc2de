#!/usr/bin/env bash
# The step-time model (issue 31, item 5): mnist_cnn --report records compute and exchange time
# per step and the gradient bytes; scripts/step_model.py predicts the step on N nodes from them;
# scripts/mnist-scaling.sh --link prints that prediction beside its measured table.
#   step_model_test.sh ROOT MNIST_CNN GPURUN DATA_DIR
set -euo pipefail
root=$1 mnist=$2 gpurun=$3 data=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-step-model.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== the model's formula, against numbers worked by hand"
PYTHONPATH=$root/scripts python3 - <<'PY'
import step_model as m
S = 11_082_536.0                       # the CNN's gradient, bytes
link = 10e9 / 8                        # 10 Gbit/s in bytes/s
# Two members: each sends and receives half the buffer twice = S bytes; plus 2 latencies.
assert abs(m.ring_seconds(S, 2, link, 50e-6) - (S / link + 2 * 50e-6)) < 1e-12
assert m.ring_seconds(S, 1, link, 50e-6) == 0.0
# Four members: one edge on the link carries 2 * 3/4 * S.
assert abs(m.ring_seconds(S, 4, link, 0) - 1.5 * S / link) < 1e-12
r = {"compute_seconds_per_step": 0.008, "exchange_seconds_per_step": 0.002,
     "gradient_bytes": S, "batch_per_rank": 64, "world_size": 2}
one = m.predict(r, 1, 10, 50e-6, 2, hierarchical=True)
assert abs(one["step"] - 0.010) < 1e-12 and abs(one["efficiency"] - 1) < 1e-12
two = m.predict(r, 2, 10, 50e-6, 2, hierarchical=True)
want = 0.010 + S / link + 2 * 50e-6     # the node exchange, then one ring between the nodes
assert abs(two["step"] - want) < 1e-12, two
assert abs(two["efficiency"] - 0.010 / want) < 1e-12
assert abs(two["images_per_second"] - 4 * 64 / want) < 1e-6
flat = m.predict(r, 2, 1, 0, 2, hierarchical=False)  # 1 Gbit/s: the link is the slow hop
# Four ranks in blocks of two: one edge of the ring leaves each node, 2 * 3/4 * S across it (the
# model said twice that, as if both ranks of a node sent across).
assert abs(flat["step"] - (0.008 + 1.5 * S / (1e9 / 8))) < 1e-12, flat
# Compressed (PowerSGD): its wire bytes in two sums (two latencies per sum), after its CPU time,
# flat too; the efficiency against a baseline's one-node step when one is given.
c = dict(r, world_size=1, grad_compression="powersgd:1", wire_bytes_per_step=S / 100)
two = m.predict(c, 2, 10, 50e-6, 1, hierarchical=False)
want = 0.010 + S / 100 / link + 2 * 2 * 50e-6
assert abs(two["step"] - want) < 1e-12, (two, want)
base = {"compute_seconds_per_step": 0.007, "exchange_seconds_per_step": 0.0005}
two = m.predict(c, 2, 10, 50e-6, 1, hierarchical=False, baseline=base)
assert abs(two["efficiency"] - 0.0075 / want) < 1e-12, two
one = m.predict(c, 1, 10, 50e-6, 1, hierarchical=False, baseline=base)
assert abs(one["efficiency"] - 0.0075 / 0.010) < 1e-12, one  # compression costs one node too
# Alternating PowerSGD (acp:R): one sum a step, one latency per hop.
for kind in ("acp:1", "acp:2"):
    a = dict(c, grad_compression=kind)
    two = m.predict(a, 2, 10, 50e-6, 1, hierarchical=False)
    want = 0.010 + S / 100 / link + 2 * 1 * 50e-6
    assert abs(two["step"] - want) < 1e-12, (kind, two, want)
# Local SGD every 16 steps in bfloat16: half the weights' bytes and two sums, every 16 steps,
# after the rank's own steps (its exchange among its threads, measured).
lsgd = dict(r, world_size=1, grad_compression="bf16", local_sgd=16, wire_bytes_per_step=S / 32)
assert not m.compressed(lsgd) and m.sums_per_step(lsgd) == 2 / 16
two = m.predict(lsgd, 2, 10, 50e-6, 1, hierarchical=False)
want = 0.010 + S / 32 / link + 2 * (2 / 16) * 50e-6
assert abs(two["step"] - want) < 1e-12, (two, want)
args = type("Args", (), dict(ranks_per_node=1, gbit=[10], nodes=[1, 2], latency_us=50))()
assert "averaged every 16 steps in bfloat16" in m.table(lsgd, args), "no local SGD in the table"
# Overlapped: an average hides behind the 16 steps after it; at 0.1 Gbit/s (an average of
# S / 2 bytes takes 0.44 s, longer than 16 steps' 0.128 s of compute) the rest shows.
over = dict(lsgd, local_sgd_overlap=True)
two = m.predict(over, 2, 10, 50e-6, 1, hierarchical=False)
assert abs(two["step"] - 0.010) < 1e-12, two
two = m.predict(over, 2, 0.1, 50e-6, 1, hierarchical=False)
ring = S / 32 / (0.1e9 / 8) + 2 * (2 / 16) * 50e-6
assert abs(two["step"] - (0.010 + ring - 0.008)) < 1e-12, (two, ring)
assert "each overlapping the next steps" in m.table(over, args), "no overlap in the table"
# An older report, without wire bytes: the whole gradient, one sum.
assert m.wire_bytes(r) == S and not m.compressed(r)
print("formula: ok")
PY

echo "== mnist_cnn --report, and mnist-scaling.sh --link beside a measured run"
"$root/scripts/mnist-scaling.sh" --ranks 2 --epochs 1 --data "$data" --out "$work/out" \
  --gpurun "$gpurun" --mnist-cnn "$mnist" --link 10,1 --latency-us 20 \
  -- --device cpu --max-steps 12 --threads 1 --exchange allreduce > "$work/log" 2>&1 ||
  { cat "$work/log"; fail "mnist-scaling.sh --link failed"; }
python3 - "$work/out" <<'PY'
import json, re, sys
out = sys.argv[1]
j = json.load(open(f"{out}/runs/ranks-2.json"))
assert j["steps_run"] == 12, j["steps_run"]
assert j["gradient_bytes"] == 4 * j["param_count"], (j["gradient_bytes"], j["param_count"])
# The whole buffer: the parameters (with their alignment padding) and the stat slots.
assert j["exchange"] == "allreduce", j["exchange"]
assert j["gradient_bytes"] <= j["exchange_bytes_per_step"] < 1.01 * j["gradient_bytes"], j
for k in ("compute_seconds_per_step", "exchange_seconds_per_step"):
    assert 0 < j[k] < 10, (k, j[k])
assert abs(j["exchange_seconds_per_step"] * 12 - j["allreduce_seconds"]) < 1e-9
md = open(f"{out}/scaling.md").read()
assert "## Predicted for more nodes" in md, md
rows = re.findall(r"^\| (\d+) Gbit/s \| (flat|hierarchical) \| (\d+) \| (\d+) \| ([\d.]+) \|", md, re.M)
assert len(rows) == 2 * 2 * 5, rows         # 2 rates x flat, hierarchical x 1,2,4,8,16 nodes
one_node = 1e3 * (j["compute_seconds_per_step"] + j["exchange_seconds_per_step"])
for gbit, kind, nodes, ranks, step in rows:
    assert int(ranks) == 2 * int(nodes)
    if nodes == "1":
        assert abs(float(step) - one_node) < 0.01, (step, one_node)
    else:
        assert float(step) >= one_node - 0.01, (gbit, kind, nodes, step, one_node)
slow = {(k, n): float(s) for g, k, n, r, s in rows if g == "1"}
fast = {(k, n): float(s) for g, k, n, r, s in rows if g == "10"}
assert slow[("hierarchical", "2")] > fast[("hierarchical", "2")], (slow, fast)
print("report and table: ok")
PY
echo "== a one-node PowerSGD report: its wire bytes and compression, the model against a baseline"
"$mnist" --device cpu --data "$data" --epochs 1 --max-steps 12 --threads 1 --seed 3 \
  --grad-compression powersgd:2 --report "$work/psgd.json" > "$work/psgd.log" 2>&1 ||
  { cat "$work/psgd.log"; fail "the one-node PowerSGD run failed"; }
"$mnist" --device cpu --data "$data" --epochs 1 --max-steps 12 --threads 1 --seed 3 \
  --report "$work/base.json" > "$work/base.log" 2>&1 ||
  { cat "$work/base.log"; fail "the one-node baseline run failed"; }
python3 "$root/scripts/step_model.py" "$work/psgd.json" --baseline "$work/base.json" --gbit 1 \
  --nodes 1,2 > "$work/psgd.md" 2>"$work/warn" || fail "step_model.py on the PowerSGD report failed"
[[ ! -s $work/warn ]] || fail "a warning for runs alike: $(cat "$work/warn")"
# A baseline with other threads per rank is faster for a reason that is not the compression: one
# line on stderr says so (the README's compression example once compared 1 thread with 2).
"$mnist" --device cpu --data "$data" --epochs 1 --max-steps 12 --threads 2 --seed 3 \
  --report "$work/base2.json" > "$work/base2.log" 2>&1 || { cat "$work/base2.log"; fail "base2"; }
python3 "$root/scripts/step_model.py" "$work/psgd.json" --baseline "$work/base2.json" --gbit 1 \
  > /dev/null 2>"$work/warn" || fail "step_model.py with a 2-thread baseline failed"
[[ $(wc -l <"$work/warn") == 1 ]] && grep -q "warning: .* 1 thread(s) per rank, the baseline .* 2" \
  "$work/warn" || fail "no one-line warning for unlike threads: $(cat "$work/warn")"
python3 - "$work" <<'PY'
import json, re, sys
w = sys.argv[1]
p, b = (json.load(open(f"{w}/{n}.json")) for n in ("psgd", "base"))
two = json.load(open(f"{w}/out/runs/ranks-2.json"))
# One rank sends nothing, yet the report says what it would send across nodes.
assert p["world_size"] == 1 and p["exchange_bytes_per_step"] == 0, p
assert p["grad_compression"] == "powersgd:2", p["grad_compression"]
assert 0 < p["wire_bytes_per_step"] < p["gradient_bytes"] / 10, p["wire_bytes_per_step"]
assert b["grad_compression"] == "none" and b["exchange"] == "shared", (b["exchange"],)
# The shared exchange stays in the node; across nodes the whole buffer would go, as the
# 2-rank allreduce run sent it.
assert b["wire_bytes_per_step"] == two["exchange_bytes_per_step"] == two["wire_bytes_per_step"], \
    (b["wire_bytes_per_step"], two["exchange_bytes_per_step"])
md = open(f"{w}/psgd.md").read()
assert "powersgd:2" in md and "against the baseline" in md, md
rows = re.findall(r"^\| 1 Gbit/s \| flat \| (\d) \| \d \| ([\d.]+) \| \d+% \| (\d+)% \|", md, re.M)
assert [n for n, _, _ in rows] == ["1", "2"], md
base = 1e3 * (b["compute_seconds_per_step"] + b["exchange_seconds_per_step"])
one = 1e3 * (p["compute_seconds_per_step"] + p["exchange_seconds_per_step"])
assert abs(float(rows[0][1]) - one) < 0.01, (rows, one)
assert abs(int(rows[0][2]) - 100 * base / one) <= 1, (rows, base, one)
assert float(rows[1][1]) > one, rows  # the link comes on top of the compression
print("PowerSGD report and model: ok")
PY
echo "== numbers that make no sense are refused, naming the option"
for bad in "--ranks-per-node -2" "--ranks-per-node 0" "--gbit -1" "--gbit nan" \
  "--latency-us -5" "--nodes 0,2"; do
  # shellcheck disable=SC2086  # $bad is an option and its value
  if python3 "$root/scripts/step_model.py" "$work/psgd.json" --gbit 1 $bad 2>"$work/err" >/dev/null; then
    fail "step_model.py accepted $bad"
  fi
  grep -q "error: ${bad%% *}: " "$work/err" || fail "$bad: unclear error: $(cat "$work/err")"
done
echo "== a report without the fields is refused by name"
echo '{"world_size": 1}' > "$work/old.json"
if python3 "$root/scripts/step_model.py" "$work/old.json" --gbit 1 2> "$work/err"; then
  fail "an old report was accepted"
fi
grep -q "lacks compute_seconds_per_step" "$work/err" || fail "unclear error: $(cat "$work/err")"
echo PASS

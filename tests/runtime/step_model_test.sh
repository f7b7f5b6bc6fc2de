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
# Four members sharing two links two by two: each link carries 2 * 2*3/4 * S.
assert abs(m.ring_seconds(S, 4, link, 0, sharers=2) - 3 * S / link) < 1e-12
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
assert abs(flat["step"] - (0.008 + 2 * 1.5 * S / (1e9 / 8))) < 1e-12, flat
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
echo "== a report without the fields is refused by name"
echo '{"world_size": 1}' > "$work/old.json"
if python3 "$root/scripts/step_model.py" "$work/old.json" --gbit 1 2> "$work/err"; then
  fail "an old report was accepted"
fi
grep -q "lacks compute_seconds_per_step" "$work/err" || fail "unclear error: $(cat "$work/err")"
echo PASS

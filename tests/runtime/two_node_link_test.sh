#!/usr/bin/env bash
# The two-node link bench (bench/two_node_link/run.sh, issue 31 item 1) as a smoke test: two
# network namespaces joined by a tbf-shaped veth, gpurun launching Open MPI over TCP between them.
# Checks:
# - link_check.py refuses a link faster than the rate it was to be shaped to (loopback, "shaped
#   to" 1 Gbit/s), and the harness's own check of its shaped link passed and printed its rate;
# - the table has its rows, each the median of 2 pairs (one node, twins, then two nodes), within
#   the pairs' range it shows, against one node and against the twins;
# - PowerSGD and alternating PowerSGD (acp) send under 1 MB a step, local SGD every 4 steps a
#   quarter of the gradient's 11.08 MB;
# - the ranks really ran on two nodes over the shaped link (the exchange at 200 Mbit/s takes at
#   least the gradient's bytes over that rate);
# - --accuracy-seeds 2 adds the accuracy table: a row a config, means of two seeds, and gaps
#   that are the one node's mean minus the two nodes' (a bad count is refused by name);
# - two runs at once both succeed (each has namespaces and a veth of its own);
# - nothing the harness made is left: no namespace, no veth, no temp dir.
#   two_node_link_test.sh ROOT BUILD_DIR DATA_DIR
set -euo pipefail
root=$1 build=$2 data=$3
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
[ "$(nproc)" -ge 2 ] || { echo "SKIP: needs 2 cores"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp /tmp/gpurun-link-test-XXXXXX.md)
log=$(mktemp /tmp/gpurun-link-test-XXXXXX.log)
trap 'rm -f "$out" "$log"' EXIT
check=$root/bench/two_node_link/link_check.py port=$((20000 + RANDOM % 20000))
python3 "$check" serve 127.0.0.1 $port & sleep 0.3
python3 "$check" send 127.0.0.1 $port 11.08 1e9 2> "$log" &&
  fail "link_check passed loopback as a 1 Gbit/s link: $(cat "$log")"
grep -q "the token bucket lets a step's gradient through unshaped" "$log" ||
  fail "link_check's refusal does not say why: $(cat "$log")"
wait
before=$(ls -d /tmp/gpurun-link-* 2>/dev/null | wc -l)
"$root/bench/two_node_link/run.sh" --accuracy-seeds two 2> "$log" &&
  fail "--accuracy-seeds two was taken"
grep -q "accuracy-seeds 'two': expected a count" "$log" || fail "no clear error: $(cat "$log")"
BUILD_DIR=$build "$root/bench/two_node_link/run.sh" --rates 200mbit \
  --configs none,powersgd:4,acp:4,local:4 \
  --repeats 2 --accuracy-seeds 2 --data "$data" --out "$out" -- --max-steps 8 2> "$log" ||
  { cat "$log" >&2; fail "the harness failed"; }
[ "$(grep -c "^two_node_link: two nodes at 200mbit" "$log")" -eq 4 ] ||
  fail "not one line a row: $(cat "$log")"
got=$(sed -n 's/^link check: .* took .* ms, \([0-9.]*\) Gbit\/s (shaped to 0.2 Gbit\/s)$/\1/p' "$log")
[ -n "$got" ] || fail "no link check of the 200 Mbit/s link: $(cat "$log")"
python3 -c "import sys; sys.exit(0 if 0.1 < float(sys.argv[1]) <= 0.22 else 1)" "$got" ||
  fail "the 200 Mbit/s link moved a burst at $got Gbit/s"
grep -q "median of 2 pairs" "$out" || fail "the table does not say it is the median of 2 pairs"
row=$(grep "^| 200mbit | plain allreduce |" "$out") || fail "no 200mbit row in: $(cat "$out")"
# | link | exchange | MB a step | 1 node | 2 nodes | efficiency | pairs' range | twins images/s |
# against twins | pairs' range | share | exchange ms/step | ...
ms=$(awk -F'|' '{gsub(/ /, "", $13); print $13}' <<< "$row")
within() {  # within EFF_FIELD RANGE_FIELD: the row's median pair lies in its pairs' range
  python3 -c "import sys; f=[x.strip().rstrip('%') for x in sys.argv[1].split('|')]; \
    lo, hi = map(float, f[$2].split('-')); sys.exit(0 if lo <= float(f[$1]) <= hi else 1)" "$row"
}
within 6 7 || fail "the median pair's efficiency is outside the pairs' range: $row"
within 9 10 || fail "the median pair's efficiency against twins is outside its range: $row"
[ "$(grep -c "^| 200mbit |" "$out")" -eq 4 ] || fail "not four rows: $(cat "$out")"
# 11.08 MB at 200 Mbit/s is 443 ms each way; a ring of two sends it once each way: >= 400 ms.
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 400 else 1)" "$ms" ||
  fail "the exchange took $ms ms a step: not over the 200 Mbit/s link? $row"
for name in "PowerSGD rank 4" "alternating PowerSGD (ACP-SGD) rank 4"; do
  psgd=$(grep -F "| 200mbit | $name |" "$out") || fail "no $name row in: $(cat "$out")"
  mb=$(awk -F'|' '{gsub(/ /, "", $4); print $4}' <<< "$psgd")
  python3 -c "import sys; sys.exit(0 if 0 < float(sys.argv[1]) < 1 else 1)" "$mb" ||
    fail "$name sent $mb MB a step: $psgd"
done
lsgd=$(grep -F "| 200mbit | local SGD, averaged every 4 steps |" "$out") ||
  fail "no local SGD row in: $(cat "$out")"
mb=$(awk -F'|' '{gsub(/ /, "", $4); print $4}' <<< "$lsgd")
[ "$mb" = 2.77 ] || fail "local SGD every 4 steps sent $mb MB a step, not 11.08 / 4: $lsgd"
grep -q "^Test accuracy over seeds 1-2 " "$out" || fail "no accuracy table: $(cat "$out")"
[ "$(grep -c "^two_node_link: accuracy, seed" "$log")" -eq 2 ] || fail "not two seeds: $(cat "$log")"
for name in "plain allreduce" "PowerSGD rank 4" "alternating PowerSGD (ACP-SGD) rank 4" \
  "local SGD, averaged every 4 steps"; do
  acc=$(grep "^| $name | [0-9.]*% |" "$out") || fail "no accuracy row for $name: $(cat "$out")"
  # | exchange | 1 node mean | 2 nodes mean | gap, mean | ± | largest gap |
  python3 -c "import sys; f=[x.strip().rstrip('%') for x in sys.argv[1].split('|')]; \
    sys.exit(0 if abs(float(f[2]) - float(f[3]) - float(f[4])) < 0.011 else 1)" "$acc" ||
    fail "the mean gap is not the means' difference: $acc"
done
# Two runs at once: each makes and removes namespaces and a veth of its own (a second run once
# removed the first's namespaces and both failed).
runs=()
for i in 1 2; do
  BUILD_DIR=$build "$root/bench/two_node_link/run.sh" --rates unshaped --configs none \
    --repeats 1 --data "$data" -- --max-steps 4 > "$log.$i" 2>&1 &
  runs+=($!)
done
for i in 1 2; do
  wait "${runs[i - 1]}" || { cat "$log.$i" >&2; rm -f "$log.$i"; fail "run $i of two at once failed"; }
  grep -q "^| unshaped | plain allreduce |" "$log.$i" || fail "run $i: no row: $(cat "$log.$i")"
  rm -f "$log.$i"
done
ip netns list | grep -q gpurun-bench && fail "a namespace was left: $(ip netns list)"
ip link | grep -q gpurun-v && fail "a veth was left"
[ "$(ls -d /tmp/gpurun-link-* 2>/dev/null | wc -l)" -le "$before" ] || fail "a temp dir was left"
echo PASS

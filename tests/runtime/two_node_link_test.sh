#!/usr/bin/env bash
# The two-node link bench (bench/two_node_link/run.sh, issue 31 item 1) as a smoke test: two
# network namespaces joined by a tbf-shaped veth, gpurun launching Open MPI over TCP between them.
# Checks the table has its rows, that PowerSGD's sends under 1 MB a step, that the ranks really ran on two nodes over the shaped link (the
# exchange at 200 Mbit/s takes at least the gradient's bytes over that rate), and that nothing
# the harness made is left: no namespace, no veth, no temp dir.
#   two_node_link_test.sh ROOT BUILD_DIR DATA_DIR
set -euo pipefail
root=$1 build=$2 data=$3
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
[ "$(nproc)" -ge 2 ] || { echo "SKIP: needs 2 cores"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp /tmp/gpurun-link-test-XXXXXX.md)
trap 'rm -f "$out"' EXIT
before=$(ls -d /tmp/gpurun-link-* 2>/dev/null | wc -l)
BUILD_DIR=$build "$root/bench/two_node_link/run.sh" --rates 200mbit --configs none,overlap:1,powersgd:4 \
  --data "$data" --out "$out" -- --max-steps 8 || fail "the harness failed"
row=$(grep "^| 200mbit | plain allreduce |" "$out") || fail "no 200mbit row in: $(cat "$out")"
# | link | exchange | MB a step | 1 node | 2 nodes | efficiency | share | exchange ms/step | ...
ms=$(awk -F'|' '{gsub(/ /, "", $9); print $9}' <<< "$row")
# 11.08 MB at 200 Mbit/s is 443 ms each way; a ring of two sends it once each way: >= 400 ms.
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 400 else 1)" "$ms" ||
  fail "the exchange took $ms ms a step: not over the 200 Mbit/s link? $row"
psgd=$(grep "^| 200mbit | PowerSGD rank 4 |" "$out") || fail "no PowerSGD row in: $(cat "$out")"
mb=$(awk -F'|' '{gsub(/ /, "", $4); print $4}' <<< "$psgd")
python3 -c "import sys; sys.exit(0 if 0 < float(sys.argv[1]) < 1 else 1)" "$mb" ||
  fail "PowerSGD sent $mb MB a step: $psgd"
ip netns list | grep -q gpurun-bench && fail "a namespace was left: $(ip netns list)"
ip link | grep -q gpurun-v && fail "a veth was left"
[ "$(ls -d /tmp/gpurun-link-* 2>/dev/null | wc -l)" -le "$before" ] || fail "a temp dir was left"
echo PASS

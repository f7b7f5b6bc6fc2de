#!/usr/bin/env bash
# bench/two_node_link/run.sh: mnist_cnn on two "nodes" joined by a real, shaped link (issue 31).
#
#   sudo bench/two_node_link/run.sh [--rates 10gbit,1gbit]
#                                   [--configs none,overlap:1,powersgd:1,acp:2] [--epochs N]
#                                   [--batch B] [--repeats N] [--accuracy-seeds N]
#                                   [--data DIR] [--build DIR] [--out FILE] [-- MNIST_CNN_ARGS...]
#
# What it makes, and removes on exit (also on failure or Ctrl-C):
#   - two network namespaces, gpurun-bench-a.ID and gpurun-bench-b.ID (ID from this run's pid, so
#     that two runs at once never share one), each a "node" with one address
#     (10.77.0.1, 10.77.0.2) on one end of a veth pair; loopback up in each;
#   - at each rate, tc tbf on both ends (each direction shaped to the rate; this kernel has tbf
#     and htb but no netem, so the latency is the veth's own, microseconds). The bucket holds
#     100 us of the rate (at least 64 KiB): a step's gradient comes after a gap of compute that
#     fills the bucket, and a bucket as large as the gradient would let it through unshaped.
#     link_check.py then times an 11 MB burst after 100 ms idle and stops the run if it beat the
#     rate by over 10%. Rate "unshaped" leaves the veth alone: the exchange's CPU cost alone;
#   - a PBS-style allocation of the two addresses (PBS_NODEFILE), under which gpurun launches the
#     ranks with the real Open MPI over TCP (btl tcp,self; nothing shared between the nodes), and
#     an rsh agent that enters node b's namespace, so mpirun starts node b's rank there.
# Each rank is pinned to a core of its own (node a core 0, node b core 1): a 2-core machine holds
# two one-core nodes. The one-node baseline is one rank on core 0, run just before each two-node
# run (a pair), so that both see the same machine: a VM's speed drifts from minute to minute.
# Between them run the twins: a one-node run on each core at once. The two nodes of this VM share
# its L3 and memory bus, which two real nodes would not; against the twins, who share them too,
# the efficiency shows what the exchange alone costs. Both efficiencies are in the table.
#
# Rows, at each rate: plain (one allreduce of the whole gradient after backward), overlapped
# (--bucket-mb 1: 1 MB buckets summed while backward goes on), PowerSGD rank 1
# (--grad-compression powersgd:1: the Dense layers' gradients as two thin matrices, two sums a
# step) and alternating PowerSGD rank 2 (acp:2: one thin matrix and one sum a step; rank 1 is
# as fast but diverged on one seed of six, bench/results/two_node_link.md). local:H (not a
# default row) is local SGD, --local-sgd H: each rank trains alone with one node's fastest
# exchange and the two average their weights every H steps (and at each epoch's end);
# local:H:bf16 adds --local-sgd-bf16 (each average's changes in bfloat16, half the bytes), and
# :overlap --local-sgd-overlap (each average within an epoch travels while the next H steps
# train, and is applied at the next one).
# Weak scaling: B images per rank (default 64); efficiency = the two nodes' images/s / (2 x the
# one node's, uncompressed and with one node's fastest exchange, of the same pair); against twins
# = the two nodes' images/s / the sum of the twins'. Each row runs N pairs (default 3) and reports
# the pair with the median efficiency, and the lowest and highest of the N, of each. Beside
# each, scripts/step_model.py's prediction for two nodes, from a one-node run of the row's own
# config in the same pair (one rank, --exchange allreduce and the config's options: its compute,
# its exchange, PowerSGD's CPU time included, and the bytes it would send), against the
# baseline's step, as a user would predict before a run. Prints a markdown table; --out writes
# it to a file as well. --configs picks the rows. Hierarchical does not apply (one rank a node).
#
# Test accuracy: the rows above train with seed 7 (row_seed), and on the 2,000 test images one
# seed's accuracy moves by about half a point from seed to seed: a single pair cannot say whether
# two nodes lose accuracy. --accuracy-seeds N trains one node and each config's two nodes with
# seeds 1..N (on the unshaped link: the link changes no result) and adds a table of the mean
# accuracy and of the two-node gap, seed by seed, with its standard error (accuracy.py).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
rates=10gbit,1gbit
configs=none,overlap:1,powersgd:1,acp:2
epochs=1
batch=64
repeats=3
seeds=0
row_seed=7    # the rows' seed
seed=$row_seed  # the seed one_node and two_nodes train with
data=$root/data/mnist
build=${BUILD_DIR:-$root/build}
out=""
extra=()
die() { echo "two_node_link: error: $*" >&2; exit 1; }
while (($#)); do
  case $1 in
    --rates) rates=${2:?--rates needs a list}; shift 2 ;;
    --configs) configs=${2:?--configs needs a list}; shift 2 ;;
    --epochs) epochs=${2:?--epochs needs a number}; shift 2 ;;
    --batch) batch=${2:?--batch needs a number}; shift 2 ;;
    --repeats) repeats=${2:?--repeats needs a number}; shift 2 ;;
    --accuracy-seeds) seeds=${2:?--accuracy-seeds needs a number}; shift 2 ;;
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (--help)" ;;
  esac
done
[[ $seeds =~ ^[0-9]+$ ]] || die "--accuracy-seeds '$seeds': expected a count, 0 for none"
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, tc)"
for tool in ip tc mpirun taskset python3; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
gpurun=$build/launcher/gpurun mnist=$build/examples/mnist_cnn/mnist_cnn
[[ -x $gpurun && -x $mnist ]] || die "build gpurun and mnist_cnn first (in $build)"
[[ -d $data ]] || die "no data in $data (scripts/fetch-data.sh)"
(($(nproc) >= 2)) || die "needs 2 cores: one a node"

id=$(($$ % 100000))  # a veth's name holds 15 characters
A=gpurun-bench-a.$id B=gpurun-bench-b.$id VA=gpurun-va$id VB=gpurun-vb$id
work=$(mktemp -d /tmp/gpurun-link-XXXXXX)
chmod 755 "$work"
cleanup() {
  set +e
  ip netns pids "$A" 2>/dev/null | xargs -r kill -9
  ip netns pids "$B" 2>/dev/null | xargs -r kill -9
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setup_nodes() {
  cleanup
  work=$(mktemp -d /tmp/gpurun-link-XXXXXX) && chmod 755 "$work"
  ip netns add "$A" && ip netns add "$B"
  ip link add "$VA" type veth peer name "$VB"
  ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B"
  ip -n "$A" addr add 10.77.0.1/24 dev "$VA" && ip -n "$B" addr add 10.77.0.2/24 dev "$VB"
  for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
  ip -n "$A" link set "$VA" up && ip -n "$B" link set "$VB" up
  # The rsh agent mpirun uses for node b: into its namespace, on core 1.
  cat > "$work/ns-rsh" <<EOF
#!/bin/sh
# ns-rsh HOST CMD...: mpirun's remote start, into the namespace that holds HOST.
host=\$1; shift
[ "\$host" = 10.77.0.2 ] || { echo "ns-rsh: unknown host \$host" >&2; exit 1; }
exec ip netns exec $B taskset -c 1 /bin/sh -c "\$*"
EOF
  chmod 755 "$work/ns-rsh"
  printf '10.77.0.1\n10.77.0.2\n' > "$work/nodefile"
}

# bits RATE: tc's rate in bits a second (0 for "unshaped").
bits() {
  [[ $1 == unshaped ]] && { echo 0; return; }
  python3 -c "import re,sys; m=re.fullmatch(r'(\d+(?:\.\d+)?)(k|m|g)?bit', sys.argv[1]); \
    sys.exit(1) if not m else print(int(float(m[1]) * {None:1,'k':1e3,'m':1e6,'g':1e9}[m[2]]))" "$1" ||
    die "rate '$1': expected tc's form, e.g. 10gbit, 500mbit, or unshaped"
}

# shape RATE: tbf on both ends, a bucket of 100 us of the rate (at least 64 KiB, a GSO packet),
# a 20 ms queue; then link_check.py's burst after idle must not beat the rate.
shape() {
  local rate=$1 b burst
  b=$(bits "$rate")
  burst=$((b / 8 / 10000)); ((burst >= 65536)) || burst=65536
  for end in "$A $VA" "$B $VB"; do
    set -- $end
    if ((b)); then
      ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$rate" burst "$burst" latency 20ms
    else
      ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
    fi
  done
  ip netns exec "$B" taskset -c 1 python3 "$root/bench/two_node_link/link_check.py" serve \
    10.77.0.2 5599 & local server=$!
  sleep 0.3
  ip netns exec "$A" taskset -c 0 python3 "$root/bench/two_node_link/link_check.py" send \
    10.77.0.2 5599 11.08 "$b" >&2 || die "the link at $rate is not shaped to its rate"
  wait "$server"
}

mnist_args=(--device cpu --threads 1 --data "$data" --epochs "$epochs" --batch-size "$batch"
  --lr-scaling linear "${extra[@]+"${extra[@]}"}")

# one_node_on NAMESPACE CORE REPORT [ARGS...]: one node's run, one rank on CORE in NAMESPACE,
# with ARGS, by default one node's fastest exchange (auto: the shared-memory exchange, whose SGD
# step is fused into the Dense layers' dW sgemm; --exchange allreduce would add a pass over the
# 11 MB gradient). Its output goes to REPORT.log, shown when it fails.
one_node_on() {
  local ns=$1 core=$2 report=$3
  shift 3
  (($#)) || set -- --exchange auto
  ip netns exec "$ns" taskset -c "$core" "$mnist" "${mnist_args[@]}" "$@" --seed "$seed" \
    --report "$report" > "$report.log" 2>&1 || { tail -20 "$report.log" >&2; return 1; }
}

# one_node REPORT: the baseline, on core 0 in node a.
one_node() { one_node_on "$A" 0 "$1" || die "the one-node run failed"; }

# twins REPORT: two one-node runs at once, node a's on core 0 (REPORT.a) and node b's on core 1
# (REPORT.b), each alone in its namespace: what the two nodes of this VM do when they never talk.
# They share the L3 and the memory bus as the two-node run does, which two real nodes would not.
twins() {
  local a b
  one_node_on "$A" 0 "$1.a" & a=$!
  one_node_on "$B" 1 "$1.b" & b=$!
  wait "$a" || die "node a's twin run failed"
  wait "$b" || die "node b's twin run failed"
}

# one_config REPORT CONFIG: the step model's input, one rank on core 0 in node a with the row's
# exchange and options (what the two nodes run, on one node).
one_config() {
  one_node_on "$A" 0 "$1" $(config_args "$2") ||
    die "the one-node run of $2 failed"
}

# pairs REPORT CONFIG: `repeats` times the one-node baseline, the twins, the config on one node,
# then the two nodes, back to back; pairs.py picks the median pair (REPORT.one, .twins.a,
# .twins.b, .conf, .two) and writes every pair's efficiencies (REPORT.effs).
pairs() {
  local to=$1 config=$2 i
  for ((i = 1; i <= repeats; ++i)); do
    one_node "$to.one.$i"
    twins "$to.twins.$i"
    one_config "$to.conf.$i" "$config"
    two_nodes "$to.two.$i" "$config"
  done
  python3 "$root/bench/two_node_link/pairs.py" "$to" "$repeats" || die "no median pair for $to"
}

# config_args CONFIG: mnist_cnn's options for a row: none, powersgd:R, acp:R, overlap:MB (the
# allreduce exchange) or local:H[:bf16][:overlap] (local SGD, each rank alone with one node's
# fastest exchange; :bf16, its averages' changes sent as bfloat16; :overlap, each average within
# an epoch travelling while the next H steps train).
config_args() {
  case $1 in
    none) echo "--exchange allreduce" ;;
    powersgd:* | acp:*) echo "--exchange allreduce --grad-compression $1" ;;
    overlap:*) echo "--exchange allreduce --bucket-mb ${1#overlap:}" ;;
    local:*) local_sgd_args "$1" ;;
    *) die "config '$1': expected none, powersgd:R, acp:R, overlap:MB or local:H[:bf16][:overlap]" ;;
  esac
}
local_sgd_args() {
  local parts args=(--exchange auto --local-sgd) p
  IFS=: read -r -a parts <<< "$1"
  [[ ${parts[1]:-} =~ ^[0-9]+$ ]] || die "config '$1': local:H needs H, the steps between averages"
  args+=("${parts[1]}")
  for p in "${parts[@]:2}"; do
    case $p in
      bf16) args+=(--local-sgd-bf16) ;;
      overlap) args+=(--local-sgd-overlap) ;;
      *) die "config '$1': '$p' is not bf16 or overlap" ;;
    esac
  done
  echo "${args[*]}"
}
for config in ${configs//,/ }; do config_args "$config" > /dev/null; done  # a typo, before any run

# two_nodes REPORT CONFIG: gpurun under a PBS-style allocation of both nodes, mpirun over TCP.
two_nodes() {
  local mca="--mca plm_rsh_agent $work/ns-rsh --mca btl tcp,self --mca btl_tcp_if_include \
10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 --bind-to none --allow-run-as-root"
  ip netns exec "$A" taskset -c 0 env PBS_JOBID=link.bench PBS_NODEFILE="$work/nodefile" \
    "$gpurun" --scheduler pbs --launcher mpirun --launcher-args "$mca" -n 2 --nproc-per-node 1 \
    --control-addr 10.77.0.1 --master-addr 10.77.0.1 --preflight off -- \
    "$mnist" "${mnist_args[@]}" --seed "$seed" $(config_args "$2") \
    --report "$1" > "$1.log" 2>&1 ||
    { tail -30 "$1.log" >&2; die "the two-node run failed"; }
}

rows=()
setup_nodes
for rate in ${rates//,/ }; do
  shape "$rate"
  gbit=$(python3 -c "import sys; print(int(sys.argv[1]) / 1e9)" "$(bits "$rate")")
  for config in ${configs//,/ }; do
    echo "two_node_link: two nodes at $rate, $config (after one node, $repeats pairs)..." >&2
    pairs "$work/$rate-$config" "$config"
    row=$(python3 "$root/bench/two_node_link/row.py" "$work/$rate-$config.one" \
      "$work/$rate-$config.two" "$rate" "$gbit" "$root/scripts" "$config" \
      "$work/$rate-$config.effs" "$work/$rate-$config.twins" "$work/$rate-$config.conf") ||
      die "no row for $rate, $config"
    rows+=("$row")
  done
done

accuracy=()
if ((seeds)); then
  shape unshaped
  for ((seed = 1; seed <= seeds; ++seed)); do
    echo "two_node_link: accuracy, seed $seed of $seeds: one node, then $configs..." >&2
    one_node "$work/acc-one.$seed"
    for config in ${configs//,/ }; do two_nodes "$work/acc-$config.$seed" "$config"; done
  done
  python3 "$root/bench/two_node_link/accuracy.py" "$work" "$seeds" "$configs" \
    > "$work/accuracy.md" || die "no accuracy table"
  mapfile -t accuracy < "$work/accuracy.md"
fi

{
  echo "Two nodes = two network namespaces on one VM, one rank each pinned to a core of its own,"
  echo "joined by a veth pair that tc tbf shapes to the rate in each direction (no netem: the"
  echo "latency is the veth's own). Open MPI $(mpirun --version | sed -n 's/.*Open MPI) //p' | head -1)"
  echo "over TCP, launched by gpurun under a PBS-style allocation. mnist_cnn on $(basename "$data"),"
  echo "$epochs epoch(s), $batch images per rank, --threads 1, seed $row_seed; two nodes --exchange allreduce"
  echo "(local SGD: auto, each rank alone); one node its fastest, auto (the SGD step fused into the"
  echo "Dense layers' dW); each row the"
  echo "median of $repeats pairs (one node, twins, then two nodes); $(date -u '+%Y-%m-%d %H:%M UTC'),"
  echo "$(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1))."
  echo
  echo "Efficiency: two nodes' images/s against twice one node's, alone on the VM. Against twins:"
  echo "against two one-node runs at once, one on each core, which share the L3 and memory bus as"
  echo "the two nodes do (two real nodes would not): what the exchange alone costs. Model's"
  echo "efficiency: scripts/step_model.py's two nodes from a one-node run of the row's config in"
  echo "the same pair (its compute, exchange and wire bytes; no overlap but of overlapped averages), against one node."
  echo
  echo "| link | exchange | MB a step | 1 node images/s | 2 nodes images/s | efficiency | pairs' range | twins images/s | against twins | pairs' range | exchange share | exchange ms/step | model's efficiency | 1-node test acc | 2-node test acc |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
  ((seeds == 0)) || { echo; printf '%s\n' "${accuracy[@]}"; }
} | tee "$work/table.md"
[[ -z $out ]] || cp "$work/table.md" "$out"

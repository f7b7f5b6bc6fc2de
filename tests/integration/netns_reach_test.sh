#!/usr/bin/env bash
# netns_reach_test.sh: the network interface, checked (issue 11, item 7), across two network
# namespaces that stand for two nodes (CTest netns_reach; labels integration;launcher).
#
#   tests/integration/netns_reach_test.sh GPURUN
#
# Two namespaces, "nodes" A (10.77.3.1) and B (10.77.3.2), joined by a veth pair, each also joined
# to this namespace (where gpurun and mpirun run) by another pair. gpurun launches as in an LSF job
# over those two hosts: mpirun starts each rank's wrapper through an agent that enters the host's
# namespace (the mechanism of blaunch or ssh; LSF_BINDIR points at it).
#  1. Rank 0 on A, rank 1 on B: each gets NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME of its own
#     interface that routes to MASTER_ADDR (A: a1, B: b1), and the job runs.
#  2. B's route to A goes through a gateway that does not exist: rank 1 cannot reach rank 0's host,
#     and gpurun, at --start-timeout, names the rank, its host and interface and stops.
# The namespaces and links are the test's own and are removed on any exit. Exit 77 (skipped)
# without root, the ip command or network namespaces.
set -euo pipefail
gpurun=$(realpath "$1")
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! command -v mpirun >/dev/null; then
  echo "netns_reach: SKIP: needs root, iproute2 and mpirun"; exit 77
fi
id=$(($$ % 100000))
nsa=gpurun-a-$id nsb=gpurun-b-$id
work=$(mktemp -d /tmp/gpurun-netns.XXXXXX)
chmod 755 "$work"
cleanup() {
  ip netns del "$nsa" 2>/dev/null || true
  ip netns del "$nsb" 2>/dev/null || true
  ip link del "ra$id" 2>/dev/null || true
  ip link del "rb$id" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "netns_reach: FAIL: $*" >&2; [[ -f $work/log ]] && sed 's/^/  log: /' "$work/log" >&2; exit 1; }

if ! ip netns add "$nsa" 2>"$work/err"; then
  echo "netns_reach: SKIP: cannot create a network namespace: $(cat "$work/err")"; exit 77
fi
ip netns add "$nsb"
inA() { ip netns exec "$nsa" "$@"; }
inB() { ip netns exec "$nsb" "$@"; }
ip link add "ra$id" type veth peer name a0 netns "$nsa"
ip link add "rb$id" type veth peer name b0 netns "$nsb"
inA ip link add a1 type veth peer name b1 netns "$nsb"
ip addr add 10.77.1.1/24 dev "ra$id" && ip link set "ra$id" up
ip addr add 10.77.2.1/24 dev "rb$id" && ip link set "rb$id" up
inA ip addr add 10.77.1.2/24 dev a0 && inA ip addr add 10.77.3.1/24 dev a1
inB ip addr add 10.77.2.2/24 dev b0 && inB ip addr add 10.77.3.2/24 dev b1
for l in lo a0 a1; do inA ip link set "$l" up; done
for l in lo b0 b1; do inB ip link set "$l" up; done
inA ip route add default via 10.77.1.1  # to gpurun and mpirun (this namespace's addresses)
inB ip route add default via 10.77.2.1

# The agent mpirun starts each "remote" daemon with: `AGENT [options] HOST COMMAND...`. Each
# "node" gets its own TMPDIR, as real nodes have their own /tmp: Open MPI keys its session
# directory (and the hwloc topology file its daemon writes there) by host name and job, and both
# namespaces share this host's name, so with one /tmp the two daemons raced on the same files
# (a daemon crashed in hwloc_shmem_topology_write, or failed on mkdir with EEXIST).
mkdir -p "$work/tmp-a" "$work/tmp-b"
cat >"$work/blaunch" <<EOF
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in
  10.77.3.1) ns=$nsa tmp=$work/tmp-a ;;
  10.77.3.2) ns=$nsb tmp=$work/tmp-b ;;
  *) echo "blaunch (netns test): unknown host \$host" >&2; exit 1 ;;
esac
export TMPDIR="\$tmp"
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$work/blaunch"

launch() {  # launch START_TIMEOUT: the job of two ranks, output of each in $work/r.RANK
  env -i PATH="$PATH" HOME="$HOME" LSB_JOBID=4242 LSB_MCPU_HOSTS="10.77.3.1 1 10.77.3.2 1" \
    LSF_BINDIR="$work" timeout 120 "$gpurun" --control-addr 10.77.1.1 --start-timeout "$1" \
    -- sh -c 'echo "$RANK $MASTER_ADDR $NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME" > '"$work"'/r.$RANK' \
    2>"$work/log"
}

launch 60 || fail "the job across the two namespaces exited $?"
[[ $(cat "$work/r.0") == "0 10.77.3.1 a1 a1" ]] || fail "rank 0 got '$(cat "$work/r.0")'"
[[ $(cat "$work/r.1") == "1 10.77.3.1 b1 b1" ]] || fail "rank 1 got '$(cat "$work/r.1")'"
echo "netns_reach: ok: rank 0 on A got interface a1, rank 1 on B got b1 (the route to 10.77.3.1)"

# B reaches A's address only through a gateway that is not there.
inB ip route add 10.77.3.1/32 via 10.77.3.99 dev b1
rm -f "$work"/r.*
start=$SECONDS
rc=0
launch 6 || rc=$?
((rc != 0)) || fail "a rank that cannot reach rank 0's host started anyway"
grep -q "rank 1 on 10.77.3.2 cannot reach rank 0's host 10.77.3.1 (MASTER_ADDR) on port [0-9]* through interface b1: " \
  "$work/log" || fail "gpurun did not name rank 1, its host and interface"
[[ ! -e $work/r.0 && ! -e $work/r.1 ]] || fail "a program started although rank 1 could not reach rank 0"
echo "netns_reach: ok in $((SECONDS - start)) s: $(grep 'cannot reach' "$work/log" | sed 's/^gpurun: //')"

#!/usr/bin/env bash
# cpubind_e2e_test.sh: --cpu-bind applied to real ranks (CTest launcher_e2e_cpubind). The detection
# through hwloc is unit-tested on a two-socket 8-GPU XML fixture (cpubind_test.cc); this checks
# what a rank sees: its Cpus_allowed_list and OMP_NUM_THREADS, through mpirun and gpurun's own fork,
# and that auto runs unbound, saying so once, when hwloc cannot read the node.
#
#   tests/launcher/cpubind_e2e_test.sh GPURUN BEAT
set -euo pipefail
gpurun=$1
work=$(mktemp -d /tmp/gpurun-cpubind.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; [[ -f $work/log ]] && sed 's/^/  log: /' "$work/log" >&2; exit 1; }
ncpu=$(nproc)
((ncpu >= 2)) || { echo "SKIP: needs 2 CPUs"; exit 77; }
prog='printf "%s %s\n" "$(awk "/^Cpus_allowed_list/ {print \$2}" /proc/self/status)" "$OMP_NUM_THREADS" > '"$work"'/r.$RANK'

for engine in mpirun local; do
  rm -f "$work"/r.*
  timeout 60 "$gpurun" -q --scheduler local --launcher $engine -n 2 --cpu-bind 1:0 -- sh -c "$prog" 2>"$work/log" ||
    fail "$engine: --cpu-bind 1:0 exited $?"
  [[ $(cat "$work/r.0") == "1 1" && $(cat "$work/r.1") == "0 1" ]] ||
    fail "$engine: 1:0 gave rank 0 '$(cat "$work/r.0")', rank 1 '$(cat "$work/r.1")'"
  rm -f "$work"/r.*
  timeout 60 "$gpurun" -q --scheduler local --launcher $engine -n 2 --cpu-bind auto -- sh -c "$prog" 2>"$work/log" ||
    fail "$engine: --cpu-bind auto exited $?"
  # No GPU here: the two ranks split the allowed CPUs, in whole cores, without overlap.
  a=$(cut -d' ' -f1 "$work/r.0") b=$(cut -d' ' -f1 "$work/r.1")
  [[ -n $a && -n $b && $a != "$b" ]] || fail "$engine: auto gave '$a' and '$b'"
  echo "ok: $engine: --cpu-bind 1:0 and auto (rank 0 on $a, rank 1 on $b)"
done

# --cpu-bind none (the default) binds nothing: each rank may run on every CPU gpurun may, with
# OMP_NUM_THREADS threads. (mpirun alone pins 1 or 2 ranks to one core each.)
mine=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
for engine in mpirun local; do
  rm -f "$work"/r.*
  timeout 60 "$gpurun" -q --scheduler local --launcher $engine -n 2 -- sh -c "$prog" 2>"$work/log" ||
    fail "$engine: no --cpu-bind exited $?"
  for r in 0 1; do
    [[ $(cut -d' ' -f1 "$work/r.$r") == "$mine" ]] ||
      fail "$engine: without --cpu-bind rank $r runs on '$(cat "$work/r.$r")', not on all of $mine"
  done
done
echo "ok: without --cpu-bind both ranks may run on $mine, through mpirun and the fork"

# hwloc with every discovery component turned off (its own HWLOC_COMPONENTS) cannot read the node:
# auto then binds nothing and says so in one line. (The fork only: mpirun reads hwloc too.)
rm -f "$work"/r.*
HWLOC_COMPONENTS=-linux,-x86,-no_os timeout 60 "$gpurun" -q --scheduler local --launcher local -n 2 \
  --cpu-bind auto -- sh -c "$prog" 2>"$work/log" || fail "auto without a topology exited $?"
[[ $(grep -c "cpu-bind auto on .*: hwloc cannot read this machine's topology: .*; the ranks run unbound" "$work/log") == 1 ]] ||
  fail "auto without a topology: expected one warning"
for r in 0 1; do
  [[ $(cut -d' ' -f1 "$work/r.$r") == "$mine" ]] ||
    fail "auto without a topology: rank $r runs on '$(cat "$work/r.$r")', not on all of $mine"
done
echo "ok: auto without a topology warns once and binds nothing"

rc=0
timeout 60 "$gpurun" --scheduler local -n 2 --cpu-bind 0:4096 -- true 2>"$work/log" || rc=$?
[[ $rc != 0 ]] && grep -q "CPU 4096 of local rank 1's list is not allowed on" "$work/log" ||
  fail "a CPU that is not allowed: exit $rc"
rc=0
timeout 60 "$gpurun" --scheduler local -n 2 --cpu-bind 0-x -- true 2>"$work/log" || rc=$?
[[ $rc == 2 ]] && grep -q -- "--cpu-bind '0-x'" "$work/log" || fail "a malformed list: exit $rc"
echo "ok: lists naming CPUs the node does not allow, or malformed, are refused"

#!/usr/bin/env bash
# preflight_e2e_test.sh: gpurun --preflight on one machine (CTest launcher_e2e_preflight).
#
#   tests/launcher/preflight_e2e_test.sh GPURUN TESTS_DIR
#
# There is no GPU here: the fake nvidia-smi-health-* scripts in TESTS_DIR/fixtures/nvidia-smi
# stand in for the driver (GPURUN_NVIDIA_SMI). Every job's program writes ran.RANK, so "no program
# started" is checked as no such file. Checks: uncorrected ECC errors, a GPU count below the
# plan's, a pending/failed row remap, a GPU fallen off the bus and a full TMPDIR each name the node
# and the reason in one line, exit 1, no program ran (the default, --preflight fail); --preflight
# warn names it and runs the job; --preflight off checks nothing; healthy or unreported ([N/A])
# figures pass silently; a missing nvidia-smi is said and the job runs; bad option values are
# refused; --preflight-bandwidth on one node measures nothing and passes; --nnodes 1:2 on one node
# cannot leave the failing node out (none would be left) and says so; its bad values are refused.
set -euo pipefail
gpurun=$1 fixtures=$2/fixtures/nvidia-smi
work=$(mktemp -d /tmp/gpurun-preflight.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.err; do [[ -f $f ]] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

host=$("$gpurun" info --json --scheduler local | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["host"])')

# run NAME FIXTURE GPUS NTASKS [OPTIONS...]: a job whose ranks each write NAME/ran.RANK; sets rc.
run() {
  local name=$1 fixture=$2 gpus=$3 n=$4
  shift 4
  mkdir -p "$work/$name"
  rc=0
  CUDA_VISIBLE_DEVICES=$gpus GPURUN_NVIDIA_SMI=$fixture timeout 60 \
    "$gpurun" --scheduler local -n "$n" "$@" -- sh -c 'touch "$0/ran.$RANK"' "$work/$name" \
    >"$work/$name.out" 2>"$work/$name.err" || rc=$?
}
ran() { find "$work/$1" -name 'ran.*' | wc -l; }

# refused NAME FIXTURE GPUS NTASKS LINE [OPTIONS...]: exit 1, LINE said as is, no program ran.
refused() {
  local name=$1 fixture=$2 gpus=$3 n=$4 line=$5
  shift 5
  run "$name" "$fixture" "$gpus" "$n" "$@"
  [[ $rc == 1 ]] || fail "$name: gpurun exited $rc, want 1"
  grep -Fxq -- "$line" "$work/$name.err" || fail "$name: no line '$line'"
  [[ $(grep -c "^gpurun: preflight: node " "$work/$name.err") == 1 ]] || fail "$name: not one line for the node"
  grep -Fxq "gpurun: preflight failed on 1 of 1 node: no program started (--preflight warn starts anyway, --preflight off skips the checks)" \
    "$work/$name.err" || fail "$name: no refusal line"
  [[ $(ran "$name") == 0 ]] || fail "$name: a program ran"
  echo "ok: $name: $line"
}

ecc="gpurun: preflight: node $host: GPU 1 (rank 1): 2 uncorrected ECC errors since the driver loaded"
refused ecc "$fixtures/nvidia-smi-health-ecc" 0,1,2,3 4 "$ecc"
refused count "$fixtures/nvidia-smi-health-ok" 0,1,2,3,4,5 6 \
  "gpurun: preflight: node $host: GPU count differs from the plan: 6 GPUs planned here, 4 found (missing: 4, 5; nvidia-smi lists 0,1,2,3)"
refused remap "$fixtures/nvidia-smi-health-remap" 0,1,2,3 4 \
  "gpurun: preflight: node $host: GPU 2 (rank 2): row remapping pending (the GPU needs a reset); GPU 3 (rank 3): a row remapping failed (the GPU needs service)"
refused lost "$fixtures/nvidia-smi-health-lost" 0,1 2 \
  "gpurun: preflight: node $host: GPU count differs from the plan: 2 GPUs planned here, 1 found (missing: 1; nvidia-smi lists 0,2,3); the driver cannot read a GPU: Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error"

# TMPDIR with less room than --preflight-min-tmp asks (100 TiB): the figure moves, so a pattern.
mkdir -p "$work/tmp"
TMPDIR=$work/tmp run tmp "$fixtures/nvidia-smi-health-ok" 0 1 --preflight-min-tmp 100T
[[ $rc == 1 ]] || fail "tmp: gpurun exited $rc, want 1"
grep -Eq "^gpurun: preflight: node $host: TMPDIR $work/tmp has [0-9]+ MiB free, under the 104857600 MiB --preflight-min-tmp asks$" \
  "$work/tmp.err" || fail "tmp: TMPDIR not named"
[[ $(ran tmp) == 0 ]] || fail "tmp: a program ran"
echo "ok: tmp: $(grep 'TMPDIR' "$work/tmp.err")"

# --preflight warn: the same line, then the job runs.
run warn "$fixtures/nvidia-smi-health-ecc" 0,1,2,3 4 --preflight warn
[[ $rc == 0 ]] || fail "warn: gpurun exited $rc, want 0"
grep -Fxq -- "$ecc" "$work/warn.err" || fail "warn: the node is not named"
grep -Fxq "gpurun: preflight failed on 1 of 1 node: starting anyway (--preflight warn)" "$work/warn.err" ||
  fail "warn: no warning line"
[[ $(ran warn) == 4 ]] || fail "warn: $(ran warn) of 4 programs ran"
echo "ok: warn: the node named, 4 programs ran"

# --preflight off: nothing checked, nothing said, the job runs.
run off "$fixtures/nvidia-smi-health-ecc" 0,1,2,3 4 --preflight off
[[ $rc == 0 ]] || fail "off: gpurun exited $rc"
! grep -q "preflight" "$work/off.err" || fail "off: preflight said something"
[[ $(ran off) == 4 ]] || fail "off: $(ran off) of 4 programs ran"
echo "ok: off: no check, 4 programs ran"

# Healthy, and unreported figures ([N/A], [Not Supported]): silent, the job runs.
for f in ok na; do
  run "$f" "$fixtures/nvidia-smi-health-$f" 0,1,2,3 4
  [[ $rc == 0 ]] || fail "$f: gpurun exited $rc"
  ! grep -q "preflight" "$work/$f.err" || fail "$f: preflight said something"
  [[ $(ran "$f") == 4 ]] || fail "$f: $(ran "$f") of 4 programs ran"
  echo "ok: $f: passed silently"
done

# No nvidia-smi: a check that cannot run is said, not a failure.
run absent "$work/absent/nvidia-smi" 0,1 2
[[ $rc == 0 ]] || fail "absent: gpurun exited $rc"
grep -q "^gpurun: preflight: node $host: GPUs not checked: .*$work/absent/nvidia-smi" "$work/absent.err" ||
  fail "absent: the missing nvidia-smi is not said"
[[ $(ran absent) == 2 ]] || fail "absent: $(ran absent) of 2 programs ran"
echo "ok: absent: $(grep 'GPUs not checked' "$work/absent.err" | cut -c1-120)"

# Ranks without GPUs: no GPU query at all (a missing nvidia-smi is not even asked).
mkdir -p "$work/cpu"
rc=0
env -u CUDA_VISIBLE_DEVICES GPURUN_NVIDIA_SMI=$work/absent/nvidia-smi timeout 60 "$gpurun" \
  --scheduler local -n 2 -- sh -c 'touch "$0/ran.$RANK"' "$work/cpu" 2>"$work/cpu.err" || rc=$?
[[ $rc == 0 && $(ran cpu) == 2 ]] || fail "cpu: exited $rc, $(ran cpu) programs ran"
! grep -q "preflight" "$work/cpu.err" || fail "cpu: preflight said something"
echo "ok: cpu: ranks without GPUs pass the GPU checks"

# --preflight-bandwidth on one node: no link to time; the job runs.
run bw "$fixtures/nvidia-smi-health-ok" 0,1 2 --preflight-bandwidth
[[ $rc == 0 && $(ran bw) == 2 ]] || fail "bw: exited $rc, $(ran bw) programs ran"
! grep -q "MB/s" "$work/bw.err" || fail "bw: a figure on one node"
echo "ok: --preflight-bandwidth on one node"

# Bad values: refused before anything starts (exit 2).
for bad in "--preflight on:--preflight 'on': expected off, warn or fail" \
  "--preflight-min-tmp 1X:--preflight-min-tmp '1X': expected a size such as 1G, 512M or 0" \
  "--preflight off --preflight-bandwidth:--preflight-bandwidth needs --preflight warn or fail, not off"; do
  rc=0
  # shellcheck disable=SC2086
  out=$("$gpurun" --scheduler local -n 1 ${bad%%:*} -- touch "$work/started" 2>&1) || rc=$?
  [[ $rc == 2 ]] || fail "'${bad%%:*}' exited $rc, want 2: $out"
  grep -qF -- "${bad#*:}" <<<"$out" || fail "'${bad%%:*}' said '$out'"
  [[ ! -e $work/started ]] || fail "'${bad%%:*}' started a rank"
done
echo "ok: bad values refused"

# --nnodes on one node (1: run() passes -n, which MIN < MAX refuses): a failing node would leave none, so the job is refused as without
# it, and says why; a healthy node runs; bad values and too few nodes are refused (exit 2).
run nnodes "$fixtures/nvidia-smi-health-ecc" 0,1,2,3 4 --nnodes 1
[[ $rc == 1 ]] || fail "nnodes: gpurun exited $rc, want 1"
grep -Fxq "gpurun: preflight failed on 1 of 1 node: no program started (--preflight warn starts anyway, --preflight off skips the checks; fewer than --nnodes 1 would be left without them)" \
  "$work/nnodes.err" || fail "nnodes: no refusal line that names --nnodes"
[[ $(ran nnodes) == 0 ]] || fail "nnodes: a program ran"
run nnodes_ok "$fixtures/nvidia-smi-health-ok" 0,1 2 --nnodes 1
[[ $rc == 0 && $(ran nnodes_ok) == 2 ]] || fail "nnodes_ok: exited $rc, $(ran nnodes_ok) programs ran"
! grep -q "left out" "$work/nnodes_ok.err" || fail "nnodes_ok: a node was left out"
for bad in "--nnodes 0|--nnodes '0': MIN must be at least 1 node" \
  "--nnodes 2:1|--nnodes '2:1': MAX (1) is below MIN (2)" \
  "--nnodes 2|--nnodes 2 needs at least 2 nodes, but the local allocation has 1" \
  "--nnodes 1:2 -n 2|-n 2 with --nnodes 1:2: the world size follows the nodes"; do
  rc=0
  arg=${bad%%|*} want=${bad#*|}
  # shellcheck disable=SC2086
  out=$("$gpurun" --scheduler local $arg -- touch "$work/started" 2>&1) || rc=$?
  [[ $rc == 2 ]] || fail "'$arg' exited $rc, want 2: $out"
  grep -qF -- "$want" <<<"$out" || fail "'$arg' said '$out', want '$want'"
  [[ ! -e $work/started ]] || fail "'$arg' started a rank"
done
# --help read whole first: `gpurun --help | grep -q` fails under pipefail when grep quits early
# and gpurun dies of SIGPIPE (a flake seen in CI).
help=$("$gpurun" --help)
grep -q -- "--nnodes MIN:MAX" <<<"$help" || fail "--help does not list --nnodes"
echo "ok: --nnodes on one node: refused with the reason, healthy runs, bad values refused"

grep -q -- "--preflight arg (=fail)" <<<"$help" || fail "--help does not list --preflight"
grep -q -- "--preflight-bandwidth" <<<"$help" || fail "--help does not list --preflight-bandwidth"
grep -q -- "--preflight-min-tmp arg (=1G)" <<<"$help" || fail "--help does not list --preflight-min-tmp"
echo PASS

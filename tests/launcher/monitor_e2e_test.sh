#!/usr/bin/env bash
# monitor_e2e_test.sh: gpurun --monitor[=SECONDS] FILE.csv on one machine (CTest launcher_e2e_monitor).
#
#   tests/launcher/monitor_e2e_test.sh GPURUN FIXTURES_DIR
#
# There is no GPU here: the fake nvidia-smi scripts in FIXTURES_DIR/nvidia-smi stand in for the
# driver (GPURUN_NVIDIA_SMI), nvidia-smi-4gpu with fixed figures (GPU 0-3 at 17, 45, 90, 0%).
# Checks: 2 ranks on GPUs 0,1 write a CSV with the header, parseable numbers, only the job's GPUs,
# each GPU's rank, one sampler per node (each sample time has each GPU once), and a summary line;
# 4 ranks on GPUs 0-3 name GPU 3 (0%, under half the median 31%) as a likely straggler; bad
# --monitor values and an unwritable FILE are refused before any rank starts; a missing
# nvidia-smi is said once and the job still succeeds; a GPU lost mid-job is said once; a hung
# nvidia-smi does not hold the job's end.
set -euo pipefail
gpurun=$1 fixtures=$2/nvidia-smi
work=$(mktemp -d /tmp/gpurun-monitor.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.err; do [[ -f $f ]] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

host=$("$gpurun" info --json --scheduler local | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["host"])')

# run NAME CUDA_VISIBLE_DEVICES NTASKS: a job of sleep 1 under --monitor=0.2 into NAME.csv.
run() {
  CUDA_VISIBLE_DEVICES=$2 GPURUN_NVIDIA_SMI=$fixtures/nvidia-smi-4gpu timeout 60 \
    "$gpurun" --scheduler local -n "$3" --monitor=0.2 "$work/$1.csv" -- sh -c 'sleep 1' \
    >"$work/$1.out" 2>"$work/$1.err" || fail "$1: gpurun exited $?"
}

# check_csv NAME HOST "GPU:RANK:UTIL ...": the CSV has exactly these GPUs, each with its rank and
# the fixture's figures, at least one sample each, and every sample time has each GPU once.
check_csv() {
  python3 - "$work/$1.csv" "$2" "$3" <<'PY' || fail "$1: CSV"
import csv, collections, datetime, sys
path, host, want = sys.argv[1], sys.argv[2], sys.argv[3].split()
text = open(path).read()
assert text.endswith("\n"), "the last row is not whole"
lines = text.splitlines()
assert lines[0] == "time,node,rank,gpu,util,mem_used_mib,power_w,temp_c", lines[0]
fixture = {"0": (17, 1024, 61.52, 31), "1": (45, 20480, 180.25, 48),
           "2": (90, 38000, 390.5, 71), "3": (0, 4, 52.1, 29)}
want = {g: r for g, r in (w.split(":") for w in want)}
per_time = collections.defaultdict(list)
for row in csv.DictReader(lines):
    datetime.datetime.strptime(row["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    assert row["node"] == host, row
    assert row["gpu"] in want, f"GPU {row['gpu']} is not the job's: {row}"
    assert row["rank"] == want[row["gpu"]], row
    got = (float(row["util"]), float(row["mem_used_mib"]), float(row["power_w"]), float(row["temp_c"]))
    assert got == fixture[row["gpu"]], (row, fixture[row["gpu"]])
    per_time[row["time"]].append(row["gpu"])
assert per_time, "no sample rows"
for t, gpus in per_time.items():
    assert sorted(gpus) == sorted(want), f"at {t}: GPUs {gpus} (one sampler per node expected)"
print(f"ok: {len(per_time)} samples of GPUs {sorted(want)}")
PY
}

# 2 ranks on GPUs 0 and 1 of 4: only those are sampled, each with its rank.
(umask 022 && run two 0,1 2)
check_csv two "$host" "0:0 1:1"
# The CSV is the user's alone, as the ranks' logs are (it was 0644 under umask 022).
[[ $(stat -c %a "$work/two.csv") == 600 ]] || fail "two.csv is mode $(stat -c %a "$work/two.csv"), want 600"
grep -Eq "^gpurun: monitor: $host: GPU 0 \(rank 0\) util mean 17% max 17%, mem mean 1024 MiB; GPU 1 \(rank 1\) util mean 45% max 45%, mem mean 20480 MiB$" "$work/two.err" ||
  fail "two: no per-node summary line"
! grep -q "likely straggler" "$work/two.err" || fail "two: a straggler named where none is"
echo "ok: 2 ranks, GPUs 0,1 of 4, summary: $(grep -m1 "monitor: $host" "$work/two.err")"

# 4 ranks on GPUs 0-3: GPU 3 idles at 0%, under half the median (31%).
run four 0,1,2,3 4
check_csv four "$host" "0:0 1:1 2:2 3:3"
grep -Fxq "gpurun: monitor: likely straggler: $host GPU 3 (rank 3): mean utilisation 0% is under half the job's median (31%)" "$work/four.err" ||
  fail "four: GPU 3 not named as a straggler"
[[ $(grep -c "likely straggler" "$work/four.err") == 1 ]] || fail "four: more than one straggler named"
echo "ok: 4 ranks, $(grep "likely straggler" "$work/four.err")"

# Bad input: a clear error naming the option, exit 2, nothing started (no marker written).
expect_refused() {  # expect_refused WANT ARGS...
  local want=$1 out rc=0
  shift
  out=$(GPURUN_NVIDIA_SMI=$fixtures/nvidia-smi-4gpu "$gpurun" --scheduler local -n 1 "$@" \
    -- touch "$work/started" 2>&1) || rc=$?
  [[ $rc == 2 ]] || fail "'$*' exited $rc, want 2: $out"
  grep -qF -- "$want" <<<"$out" || fail "'$*' said '$out', wanted '$want'"
  [[ ! -e $work/started ]] || fail "'$*' started a rank"
  echo "ok: refused $* -> $out"
}
expect_refused "--monitor=abc: expected SECONDS between samples, a number from 0.1 to 3600" --monitor=abc "$work/x.csv"
expect_refused "--monitor=0: expected SECONDS" --monitor=0 "$work/x.csv"
expect_refused "--monitor=-1: expected SECONDS" --monitor=-1 "$work/x.csv"
expect_refused "--monitor: expected FILE.csv after it" --monitor
expect_refused "--monitor=2: expected FILE.csv after it (--monitor[=SECONDS] FILE.csv), not '-n'" --monitor=2 -n 1
expect_refused "--monitor $work/no/such/dir/m.csv: cannot write it: No such file or directory" --monitor "$work/no/such/dir/m.csv"
# --dry-run checks --monitor's value as a launch does, and that FILE.csv could be written
# (without creating it).
out=$("$gpurun" --scheduler local -n 1 --dry-run --monitor=abc "$work/x.csv" -- true 2>&1) && rc=0 || rc=$?
[[ $rc == 2 ]] || fail "--dry-run --monitor=abc exited $rc, want 2: $out"
grep -qF -- "--monitor=abc: expected SECONDS between samples" <<<"$out" || fail "--dry-run --monitor=abc said '$out'"
"$gpurun" --scheduler local -n 1 --dry-run --monitor=0.5 "$work/x.csv" -- true >/dev/null ||
  fail "--dry-run refused a good --monitor=0.5"
[[ ! -e $work/x.csv ]] || fail "--dry-run wrote the monitor file"
for bad in "$work/no/such/dir/m.csv:No such file or directory" "$work:Is a directory"; do
  out=$("$gpurun" --scheduler local -n 1 --dry-run --monitor "${bad%:*}" -- true 2>&1) && rc=0 || rc=$?
  [[ $rc == 2 ]] || fail "--dry-run --monitor ${bad%:*} exited $rc, want 2: $out"
  grep -qF -- "--monitor ${bad%:*}: cannot write it: ${bad##*:}" <<<"$out" ||
    fail "--dry-run --monitor ${bad%:*} said '$out'"
done
echo "ok: --dry-run refuses --monitor=abc and unwritable files, accepts --monitor=0.5"

# No nvidia-smi: said once, the job still succeeds, the CSV keeps its header.
rc=0
GPURUN_NVIDIA_SMI=$work/absent/nvidia-smi CUDA_VISIBLE_DEVICES=0,1 timeout 60 "$gpurun" \
  --scheduler local -n 2 --monitor "$work/none.csv" -- sh -c 'sleep 0.5' 2>"$work/none.err" || rc=$?
[[ $rc == 0 ]] || fail "without nvidia-smi the job exited $rc"
[[ $(grep -c "cannot sample the GPUs of $host: cannot run $work/absent/nvidia-smi" "$work/none.err") == 1 ]] ||
  fail "the missing nvidia-smi is not said exactly once"
[[ $(cat "$work/none.csv") == "time,node,rank,gpu,util,mem_used_mib,power_w,temp_c" ]] ||
  fail "the CSV without samples is not just its header"
echo "ok: no nvidia-smi: $(grep -m1 'cannot sample' "$work/none.err")"

# A GPU of the job falls off the bus mid-job: the driver's words and the missing GPU are each
# said once (not every sample), and the job still succeeds. The job lasts until the sampler has
# run 6 times (3 with the GPU, 3 without; a fixed sleep gave fewer on a busy machine), or until
# the 60 s timeout fails the test.
rc=0
state=$work/vanish.state
FAKE_NVIDIA_SMI_STATE=$state GPURUN_NVIDIA_SMI=$fixtures/nvidia-smi-vanish \
  CUDA_VISIBLE_DEVICES=2,3 timeout 60 "$gpurun" --scheduler local -n 2 --monitor=0.2 \
  "$work/vanish.csv" -- sh -c 'until [ "$(cat "$1" 2>/dev/null || echo 0)" -ge 6 ]; do
    sleep 0.1; done' sh "$state" 2>"$work/vanish.err" || rc=$?
[[ $rc == 0 ]] || fail "with a GPU lost the job exited $rc"
(($(cat "$state") >= 6)) || fail "vanish: fewer than 6 samples"
[[ $(grep -c "^gpurun: monitor: $host: Unable to determine the device handle for GPU2" "$work/vanish.err") == 1 ]] ||
  fail "the lost GPU's error is not said exactly once"
[[ $(grep -cFx "gpurun: monitor: $host: GPU 2 of the job is not among the GPUs listed here (0,1,3)" "$work/vanish.err") == 1 ]] ||
  fail "the job's missing GPU 2 is not named exactly once"
echo "ok: a GPU lost mid-job: $(grep -m1 "GPU 2 of the job" "$work/vanish.err")"

# An nvidia-smi that hangs is killed when the job ends: the EXIT does not wait out its 10 s.
# (--preflight off: the preflight's own query would wait those 10 s before the job starts.)
printf '#!/bin/sh\nexec sleep 60\n' >"$work/hung-nvidia-smi"
chmod +x "$work/hung-nvidia-smi"
start=$(date +%s.%N)
GPURUN_NVIDIA_SMI=$work/hung-nvidia-smi CUDA_VISIBLE_DEVICES=0 timeout 60 "$gpurun" \
  --scheduler local -n 1 --preflight off --monitor "$work/hung.csv" -- sh -c 'sleep 0.5' 2>"$work/hung.err" ||
  fail "with a hung nvidia-smi the job exited $?"
took=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$start" "$(date +%s.%N)")
python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 6)" "$took" ||
  fail "a job of 0.5 s took $took s with a hung nvidia-smi"
! grep -q "cannot sample" "$work/hung.err" || fail "a sample cut short by the job's end was reported"
echo "ok: a hung nvidia-smi is cut short at the end: the job took $took s"
echo PASS

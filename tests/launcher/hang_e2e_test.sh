#!/usr/bin/env bash
# hang_e2e_test.sh: --hang-timeout end to end (CTest launcher_e2e_hang).
#
#   tests/launcher/hang_e2e_test.sh GPURUN BEAT BEAT_MPI
#
# 0. --help states the rule as the code applies it: no rank progresses, or one stays behind.
# 1. 4 MPI ranks through mpirun; rank 2 stops itself (SIGSTOP) while the others wait for it in
#    MPI_Allreduce: with --hang-timeout 5 the job ends with status 124 within 15 s, the summary
#    says "ranks 0-1,3 in MPI_Allreduce; rank 2 in raise: it is behind", and --output-dir holds a
#    stack file for every rank. Under umask 022 the folders gpurun made are 0700, its files 0600.
# 2. 3 ranks through gpurun's own fork, no MPI: rank 1 sleeps in nanosleep while the others keep
#    beating: its step stays behind, and gpurun-local-PID-hang/ gets the stacks; from a folder
#    gpurun cannot write (/proc) they go under $TMPDIR, in a line that says so.
# 3. A Python rank stuck in a function: its traceback (faulthandler) names the function.
# 4. No false alarm: ranks that beat, or only print, or beat slower than the others but advance,
#    run to the end; a silent one is a hang.
# 5. A Python script that prints every second without flush is no hang (PYTHONUNBUFFERED=1).
# 6. A Python rank waiting inside a library is named by the user's frame that called it.
set -euo pipefail
gpurun=$1 beat=$2 beat_mpi=$3
work=$(mktemp -d /tmp/gpurun-hang.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; [[ -f $work/log ]] && sed 's/^/  log: /' "$work/log" >&2; exit 1; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# 0. --help says what the rule is: no rank progresses (it said "without progress ... of any
#    rank", which reads as one silent rank being enough).
help=$("$gpurun" --help | tr -s ' \n' ' ')
grep -qF "seconds: when no rank makes progress (a heartbeat or output) for this long, or one rank's step stays behind the others' without advancing for this long, the job hangs" <<<"$help" ||
  fail "--help does not say the hang rule: $(grep -o -- '--hang-timeout.\{0,300\}' <<<"$help")"

# 1. SIGSTOP under mpirun.
start=$(date +%s.%N)
rc=0
(umask 022 && timeout 60 "$gpurun" --scheduler local --launcher mpirun -n 4 --hang-timeout 5 \
  --output-dir "$work/out/job" -- "$beat_mpi" --hang-rank 2 --hang-step 10 --hang stop) \
  2>"$work/log" || rc=$?
secs=$(elapsed "$start")
[[ $rc == 124 ]] || fail "SIGSTOP: exit $rc, want 124"
awk -v s="$secs" 'BEGIN { exit !(s < 15) }' || fail "SIGSTOP: the job took $secs s to end (limit 15)"
# Either rule may see it first: nobody progresses, and rank 2 is a step behind.
grep -Eq "no rank made progress for 5 s|rank 2's step \(9\) stayed behind the others' \(10\) for 5 s" \
  "$work/log" || fail "SIGSTOP: no hang line"
grep -qF "ranks 0-1,3 in MPI_Allreduce; rank 2 in raise: it is behind" "$work/log" ||
  fail "SIGSTOP: the summary does not group the ranks as expected"
for r in 0 1 2 3; do
  f=$work/out/job/rank-$r.stack
  [[ -s $f ]] || fail "SIGSTOP: no stack file for rank $r"
  grep -q "^=== process" "$f" && grep -q "^#0 " "$f" || fail "SIGSTOP: $f holds no stack"
done
grep -q "PMPI_Allreduce\|MPI_Allreduce" "$work/out/job/rank-0.stack" || fail "rank 0's stack lacks MPI_Allreduce"
# What one user owns no other user reads, under umask 022 too: the folders gpurun made 0700, the
# ranks' logs and stacks 0600 (they were 0755 and 0644).
modes=$(cd "$work/out" && stat -c '%n %a' . job job/rank-*.stack job/rank-*.out job/rank-*.err)
[[ $(awk '$2 != ($1 == "." || $1 == "job" ? 700 : 600)' <<<"$modes") == "" && $(wc -l <<<"$modes") == 14 ]] ||
  fail "--output-dir under umask 022: modes $(tr '\n' ' ' <<<"$modes")(want 700 folders, 600 files)"
echo "ok: SIGSTOP of rank 2 ended the job in ${secs}s: $(grep 'in raise' "$work/log" | sed 's/^gpurun: //')"

# 2. nanosleep without MPI, stacks in the default folder.
rc=0
timeout 60 "$gpurun" --scheduler local --launcher local -n 3 --hang-timeout 2 \
  -- "$beat" --hang-rank 1 --hang-step 10 --hang sleep 2>"$work/log" || rc=$?
[[ $rc == 124 ]] || fail "nanosleep: exit $rc, want 124"
grep -q "rank 1's step (9) stayed behind the others'" "$work/log" || fail "nanosleep: not called behind"
grep -qF "rank 1 in clock_nanosleep: it is behind" "$work/log" || fail "nanosleep: summary"
dir=$(ls -d "$work"/gpurun-local-*-hang) || fail "nanosleep: no gpurun-local-PID-hang folder"
[[ $(ls "$dir" | wc -l) == 3 ]] || fail "nanosleep: $(ls "$dir" | wc -l) stack files, want 3"
echo "ok: a rank sleeping behind the others: $(grep 'it is behind' "$work/log" | sed 's/^gpurun: //')"

# 2b. A working folder gpurun cannot write (/proc): the stacks go under $TMPDIR, in a line that
#     says so, and gpurun claims only files it wrote (it printed "cannot write
#     gpurun-local-PID-hang/rank-0.stack" and then "stacks of all 2 ranks in gpurun-local-PID-hang/").
mkdir "$work/tmp"
rc=0
(cd /proc && TMPDIR=$work/tmp timeout 60 "$gpurun" --scheduler local --launcher local -n 2 \
  --hang-timeout 2 -- "$beat" --hang-rank 1 --hang-step 10 --hang sleep) 2>"$work/log" || rc=$?
[[ $rc == 124 ]] || fail "/proc: exit $rc, want 124"
grep -Eq "^gpurun: cannot make gpurun-local-[0-9]+-hang \(.*\): the stacks go to $work/tmp/gpurun-local-[0-9]+-hang-[A-Za-z0-9]{6}/\$" \
  "$work/log" || fail "/proc: no line saying where the stacks went"
! grep -q "cannot write" "$work/log" || fail "/proc: a stack file was not written"
dir=$(ls -d "$work"/tmp/gpurun-local-*-hang-*) || fail "/proc: no folder under TMPDIR"
[[ $(stat -c %a "$dir") == 700 ]] || fail "/proc: $dir is $(stat -c %a "$dir"), want 700"
[[ $(ls "$dir" | wc -l) == 2 ]] || fail "/proc: $(ls "$dir" | wc -l) stack files, want 2"
grep -qFx "gpurun: stacks of all 2 ranks in $dir/" "$work/log" || fail "/proc: the stacks' folder is not named"
echo "ok: from /proc the stacks went to $dir/"

# 3. Python: the traceback names the function it is stuck in.
cat >"$work/hang.py" <<'PY'
import os, time
def stuck_here():
    time.sleep(3600)
for step in range(100000):
    if os.environ["RANK"] == "1" and step == 5:
        stuck_here()
    with open(os.environ["GPURUN_HEARTBEAT"], "w") as f:
        f.write(str(step))
    time.sleep(0.1)
PY
rc=0
timeout 60 "$gpurun" --scheduler local --launcher local -n 2 --hang-timeout 5 --output-dir "$work/py" \
  -- python3 "$work/hang.py" 2>"$work/log" || rc=$?
[[ $rc == 124 ]] || fail "python: exit $rc, want 124"
grep -qE "rank 1 in hang.py:3 in stuck_here: it is behind" "$work/log" || fail "python: summary"
grep -q "Current thread" "$work/py/rank-1.stack" || fail "python: no traceback in the stack file"
echo "ok: a Python rank: $(grep 'stuck_here' "$work/log" | sed 's/^gpurun: //')"

# 4. No false alarms; a silent rank is one.
timeout 60 "$gpurun" -q --scheduler local --launcher local -n 2 --hang-timeout 2 \
  -- "$beat" --steps 30 --interval-ms 100 2>"$work/log" || fail "beating ranks were stopped"
timeout 60 "$gpurun" -q --scheduler local --launcher local -n 2 --hang-timeout 2 \
  -- sh -c 'for i in 1 2 3 4 5 6; do echo tick; sleep 0.5; done' >/dev/null 2>"$work/log" ||
  fail "printing ranks were stopped"
# A slower rank that still advances (a step every 2 s against rank 0's 0.25 s: behind all the
# time, by more than --hang-timeout in all), ranks that all sit on one long step until the first
# moves on, and a rank that never beats but prints while rank 0 beats, are no hang. (Heartbeats
# are read once a second: a 2 s step is seen 1-3 s apart, well inside 6 s.)
timeout 60 "$gpurun" -q --scheduler local --launcher local -n 2 --hang-timeout 6 -- sh -c \
  'i=0; while [ $i -lt 5 ]; do printf %08d $i >"$GPURUN_HEARTBEAT"; i=$((i+1)); [ $RANK = 0 ] && sleep 0.25 || sleep 2; done' \
  2>"$work/log" || fail "a slower rank that still advances was called a hang"
timeout 60 "$gpurun" -q --scheduler local --launcher local -n 2 --hang-timeout 3 -- sh -c \
  'printf %08d 1 >"$GPURUN_HEARTBEAT"; for i in 1 2 3 4 5 6 7 8; do echo evaluating; sleep 0.5; done; [ $RANK = 1 ] && sleep 1; printf %08d 2 >"$GPURUN_HEARTBEAT"; sleep 2' \
  >/dev/null 2>"$work/log" || fail "ranks leaving one long step together were called a hang"
timeout 60 "$gpurun" -q --scheduler local --launcher local -n 2 --hang-timeout 2 -- sh -c \
  'for i in $(seq 16); do if [ $RANK = 0 ]; then printf %08d $i >"$GPURUN_HEARTBEAT"; else echo tick; fi; sleep 0.25; done' \
  >/dev/null 2>"$work/log" || fail "a rank that prints but never beats was called a hang"
rc=0
timeout 60 "$gpurun" --scheduler local --launcher local -n 2 --hang-timeout 2 -- sleep 60 \
  2>"$work/log" || rc=$?
[[ $rc == 124 ]] && grep -q "no rank made progress for 2 s" "$work/log" || fail "silent ranks: exit $rc"
echo "ok: beating or printing ranks run to the end; silent ones are a hang"

# 5. Issue 25, item 2: a Python script that prints every second without flush survives
# --hang-timeout 4: gpurun sets PYTHONUNBUFFERED=1 (its output came in 8 KiB blocks into the pipe,
# nothing for 4 s: stopped with 124), through mpirun and the fork. A user's own value is kept.
cat >"$work/tick.py" <<'PY'
import os, time
for i in range(7):
    print(f"rank {os.environ['RANK']} tick {i} {os.environ.get('PYTHONUNBUFFERED')}")
    time.sleep(1)
PY
for engine in mpirun local; do
  rc=0
  env -u PYTHONUNBUFFERED timeout 60 "$gpurun" -q --scheduler local --launcher $engine -n 2 \
    --hang-timeout 4 -- python3 "$work/tick.py" >"$work/out.txt" 2>"$work/log" || rc=$?
  [[ $rc == 0 && $(grep -c ' tick .* 1$' "$work/out.txt") == 14 ]] ||
    fail "$engine: a printing Python script under --hang-timeout 4: exit $rc, $(wc -l <"$work/out.txt") lines"
done
PYTHONUNBUFFERED=x timeout 60 "$gpurun" -q --scheduler local -n 1 -- python3 -c \
  'import os; print(os.environ["PYTHONUNBUFFERED"])' | grep -qx x || fail "the user's PYTHONUNBUFFERED was replaced"
echo "ok: a Python script printing without flush runs to the end under --hang-timeout 4"

# 6. A Python rank waiting inside a library (torch laid out in a venv's site-packages) is named by
# the user's frame that called it, not the library's.
python3 -m venv --without-pip "$work/venv"
sp=$(echo "$work"/venv/lib/python3*/site-packages)
mkdir -p "$sp/torch/autograd"
printf 'from . import autograd\n' >"$sp/torch/__init__.py"
printf 'import time\ndef backward(t):\n    _run_backward(t)\ndef _run_backward(t):\n    time.sleep(3600)\n' \
  >"$sp/torch/autograd/__init__.py"
cat >"$work/train.py" <<'PY'
import os, time, torch
def step(i):
    if os.environ["RANK"] == "1" and i == 5:
        torch.autograd.backward(None)
    with open(os.environ["GPURUN_HEARTBEAT"], "w") as f:
        f.write(str(i))
for i in range(100000):
    step(i)
    time.sleep(0.1)
PY
rc=0
PATH="$work/venv/bin:$PATH" timeout 60 \
  "$gpurun" --scheduler local --launcher local -n 2 --hang-timeout 4 -- python3 "$work/train.py" \
  2>"$work/log" || rc=$?
[[ $rc == 124 ]] || fail "python in a library: exit $rc, want 124"
grep -qF "rank 1 in train.py:4 in step: it is behind" "$work/log" ||
  fail "python in a library: the summary does not name the user's frame"
echo "ok: a Python rank stuck in a library: $(grep 'train.py:4' "$work/log" | sed 's/^gpurun: //')"

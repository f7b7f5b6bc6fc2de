#!/usr/bin/env bash
# What a rank leaves behind (issue 26, item 7): a process its program started with setsid (outside
# the program's process group) is gone when gpurun returns, through mpirun and gpurun's own fork;
# the folder of a wrapper that was killed is removed by the next wrapper on the host once its owner
# is gone, told by pid and start time (a live process that reused the pid is no owner), and the
# folder of a live owner stays; mpirun's session folder is private and removed, and one a killed
# gpurun left is removed by the next gpurun.
set -euo pipefail
gpurun=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# A unique sleep per run (seconds 4<pid><rank>), so that only this test's processes are looked for.
secs="4$$"
for engine in mpirun local; do
  rc=0
  timeout 60 "$gpurun" -q --scheduler local --launcher $engine -n 2 -- \
    bash -c "setsid sleep $secs\$RANK </dev/null >/dev/null 2>&1 & sleep 0.3; echo started" \
    >"$tmp/out" 2>&1 || rc=$?
  [[ $rc == 0 && $(grep -c started "$tmp/out") == 2 ]] || { echo "FAIL($engine): exit $rc"; cat "$tmp/out"; exit 1; }
  left=$(pgrep -f "^sleep $secs[01]\$" || true)
  if [[ -n $left ]]; then
    echo "FAIL($engine): the ranks' setsid sleeps survived gpurun: $left"
    kill $left 2>/dev/null || true
    exit 1
  fi
  echo "ok: $engine: the ranks' setsid children are gone when gpurun returns"
done

# mpirun's session folder: on one machine each gpurun gives its mpirun a private one under TMPDIR
# (Open MPI 4.1 races on the shared TMPDIR/ompi.HOST.UID, open-mpi/ompi#8510), removed at the end;
# a user's own OMPI_MCA_orte_tmpdir_base is kept.
s=$tmp/s; mkdir "$s"
TMPDIR=$s timeout 60 "$gpurun" -q --scheduler local --launcher mpirun -n 2 -- \
  bash -c 'echo "$OMPI_MCA_orte_jobfam_session_dir" > "$0/session.$RANK"; stat -c %a "$OMPI_MCA_orte_tmpdir_base" > "$0/mode.$RANK"' "$tmp"
for r in 0 1; do
  [[ $(cat "$tmp/session.$r") == "$s"/gpurun-ompi-"$(hostname)"-p*.*-??????/ompi.* ]] ||
    { echo "FAIL: rank $r's mpirun session folder $(cat "$tmp/session.$r") is not a private one under $s"; exit 1; }
  [[ $(cat "$tmp/mode.$r") == 700 ]] || { echo "FAIL: the private session folder's mode is $(cat "$tmp/mode.$r")"; exit 1; }
done
[[ -z $(ls -A "$s") ]] || { echo "FAIL: left in TMPDIR after gpurun: $(ls -A "$s")"; exit 1; }
mkdir "$s/mine"
TMPDIR=$s OMPI_MCA_orte_tmpdir_base=$s/mine timeout 60 "$gpurun" -q --scheduler local --launcher mpirun -n 1 -- \
  bash -c 'echo "$OMPI_MCA_orte_jobfam_session_dir" > "$0/session.mine"' "$tmp"
[[ $(cat "$tmp/session.mine") == "$s"/mine/ompi.* ]] ||
  { echo "FAIL: the user's OMPI_MCA_orte_tmpdir_base was not kept: $(cat "$tmp/session.mine")"; exit 1; }
echo "ok: a single-machine mpirun has a private session folder, gone at the end; the user's choice is kept"

# ... and a gpurun SIGKILLed under its mpirun leaves it (no destructor runs), but not its job:
# the wrappers see gpurun's control connection close and end their programs, and mpirun ends
# with them (in 3-4 s here). The next gpurun here removes the folder, as it removes those named
# by a pid that is gone or reused, and keeps a live one's.
h=$(hostname)
start=$(awk '{ print $22 }' /proc/$$/stat)
dead=$(bash -c 'echo $$')  # a pid that has just ended
fail() { echo "FAIL: $*"; exit 1; }
TMPDIR=$s timeout 60 "$gpurun" -q --scheduler local --launcher mpirun -n 1 -- \
  bash -c 'echo "$OMPI_MCA_orte_tmpdir_base" > "$0/killed.session"; exec sleep "$1"' "$tmp" "6$$" &
victim=$!
for _ in $(seq 300); do [[ -s $tmp/killed.session ]] && break; sleep 0.1; done
[[ -s $tmp/killed.session ]] || fail "the rank under mpirun did not start in 30 s"
killed=$(cat "$tmp/killed.session")
gp=$(pgrep -P $victim -x gpurun) || fail "no gpurun under timeout $victim"
kill -9 "$gp"
wait $victim 2>/dev/null || true
for _ in $(seq 100); do pgrep -f "killed.session" >/dev/null || break; sleep 0.1; done
if pgrep -fa "killed.session"; then
  pkill -f "^sleep 6$$\$"
  fail "10 s after gpurun was SIGKILLed, its mpirun job still runs (above)"
fi
[[ -d $killed ]] || { echo "FAIL: the SIGKILLed gpurun's session folder $killed is not there to remove"; exit 1; }
mkdir "$s/gpurun-ompi-$h-p$$.1-reused" "$s/gpurun-ompi-$h-p$$.$start-live" \
  "$s/gpurun-ompi-$h-p$dead.1-gone"
TMPDIR=$s timeout 60 "$gpurun" -q --scheduler local --launcher mpirun -n 1 -- true
for d in "$killed" "$s/gpurun-ompi-$h-p$$.1-reused" "$s/gpurun-ompi-$h-p$dead.1-gone"; do
  [[ ! -e $d ]] || { echo "FAIL: $d (owner gone) was not removed by the next gpurun"; ls "$s"; exit 1; }
done
[[ -d $s/gpurun-ompi-$h-p$$.$start-live ]] || { echo "FAIL: a live gpurun's session folder was removed"; exit 1; }
echo "ok: a SIGKILLed gpurun's mpirun job ends with it; its session folder is removed by the next gpurun, a live one's stays"

# Rank folders. $$ is alive: a folder that names it with another start time was left by a dead
# wrapper whose pid came back; one with its real start time has a live owner.
t=$tmp/t; mkdir "$t"
mkdir "$t/gpurun-$h-p$$.1-rank0-reused" "$t/gpurun-$h-p$$.$start-rank0-live" \
  "$t/gpurun-$h-p$dead-rank0-oldname"
# A wrapper SIGKILLed under its running program (PR_SET_PDEATHSIG ends the program too).
rc=0
TMPDIR=$t timeout 60 "$gpurun" -q --scheduler local --launcher local -n 1 -- \
  bash -c 'dirname "$GPURUN_HEARTBEAT" > "$0/killed.dir"; kill -9 $PPID; sleep 5' "$tmp" 2>/dev/null || rc=$?
killed=$(cat "$tmp/killed.dir")
[[ $rc != 0 && -d $killed ]] || { echo "FAIL: the killed wrapper's folder $killed is not there (exit $rc)"; exit 1; }
TMPDIR=$t timeout 60 "$gpurun" -q --scheduler local -n 1 -- true
for d in "$killed" "$t/gpurun-$h-p$$.1-rank0-reused" "$t/gpurun-$h-p$dead-rank0-oldname"; do
  [[ ! -e $d ]] || { echo "FAIL: $d (owner gone) was not removed by the next wrapper"; ls "$t"; exit 1; }
done
[[ -d $t/gpurun-$h-p$$.$start-rank0-live ]] || { echo "FAIL: a live owner's folder was removed"; exit 1; }
echo "ok: folders of dead wrappers are removed by the next one (pid and start time), a live one's stays"

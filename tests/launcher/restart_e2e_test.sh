#!/usr/bin/env bash
# restart_e2e_test.sh: --max-restarts end to end through mpirun (CTest launcher_e2e_restart).
#
#   tests/launcher/restart_e2e_test.sh GPURUN BEAT_MPI
#
# 1. Rank 1 fails on the first attempt only: gpurun restarts all ranks once, with
#    GPURUN_RESTART_COUNT=1, and the job succeeds; each rank's --output-dir file shows both, each
#    after a line "==> attempt K <==".
# 2. A rank that fails every time: restarts are counted for the whole job (2 of 2), then gpurun
#    exits with the rank's status.
# 3. A failure before every rank started (the program cannot be executed) is not retried, and is
#    reported in one line without the engine's banners.
# 4. A signal from the user, and a checkpoint stop (USR1, then exit 0), are not failures.
# 5. MPI_Abort in every rank is said in one line, without Open MPI's frame.
# 6. --nnodes 1 on one node: a rank SIGKILLed would leave its node out, but none would be left;
#    gpurun says so and restarts all ranks on the same node, as without --nnodes.
set -euo pipefail
gpurun=$1 beat_mpi=$2
work=$(mktemp -d /tmp/gpurun-restart.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; [[ -f $work/log ]] && sed 's/^/  log: /' "$work/log" >&2; exit 1; }
run() { timeout 60 "$gpurun" --scheduler local --launcher mpirun -n 2 "$@" 2>"$work/log"; }

# 1. Cured by one restart.
prog=(sh -c 'echo "attempt $GPURUN_RESTART_COUNT"; exec "$0" "$@"' "$beat_mpi" --steps 15
  --interval-ms 20 --hang-rank 1 --hang-step 5 --hang exit --on-attempt 0)
run --max-restarts 1 --output-dir "$work/out" -- "${prog[@]}" >/dev/null || fail "not cured: exit $?"
grep -q "rank 1 on .* exited with code 3 after .* s: restarting all 2 ranks (restart 1 of 1)" \
  "$work/log" || fail "no restart line"
# Each attempt is marked in every file (issue 25, item 2: they were appended with no separator).
for r in 0 1; do
  [[ $(tr '\n' ' ' <"$work/out/rank-$r.out") == "==> attempt 1 <== attempt 0 ==> attempt 2 <== attempt 1 " ]] ||
    fail "rank $r saw '$(tr '\n' ' ' <"$work/out/rank-$r.out")', want both attempts, each marked"
  [[ $(grep -c '^==> attempt [12] <==$' "$work/out/rank-$r.err") == 2 ]] || fail "rank-$r.err: attempts not marked"
done
echo "ok: $(grep restarting "$work/log" | sed 's/^gpurun: //'); then exit 0"

# 2. Restarts run out.
rc=0
run --max-restarts 2 -- "$beat_mpi" --steps 15 --interval-ms 20 --hang-rank 1 --hang-step 5 \
  --hang exit || rc=$?
[[ $rc == 3 ]] || fail "always failing: exit $rc, want 3"
[[ $(grep -c "restarting all 2 ranks" "$work/log") == 2 ]] || fail "not 2 restarts"
grep -q "rank 1 on .* exited with code 3 after .*; stopped 1 other rank (after 2 restarts)" \
  "$work/log" || fail "no final line"
echo "ok: $(tail -n 1 "$work/log" | sed 's/^gpurun: //')"

# 3. Not started: not retried, one line, no engine banner.
printf '#!/nonexistent/interpreter\n' >"$work/broken"
chmod +x "$work/broken"
rc=0
run --max-restarts 3 -- "$work/broken" || rc=$?
[[ $rc == 127 ]] || fail "unstartable program: exit $rc, want 127"
grep -q "not restarting: rank . failed before every rank had started" "$work/log" ||
  fail "no 'not restarting' line"
! grep -q "restarting all" "$work/log" || fail "a job that never started was restarted"
[[ $(grep -c "cannot run '$work/broken': No such file or directory" "$work/log") == 1 ]] ||
  fail "the exec failure is not said once"
! grep -q -- "-----" "$work/log" || fail "the engine's banner was shown"
echo "ok: $(grep 'cannot run' "$work/log" | sed 's/^gpurun: //')"

# 4. A user's SIGTERM and a checkpoint stop are not failures to restart.
cat >"$work/rank.sh" <<'R'
#!/usr/bin/env bash
trap 'exit 0' USR1
touch "$OUT/ready.$RANK.$GPURUN_RESTART_COUNT"
for i in $(seq 600); do sleep 0.05; done
R
chmod +x "$work/rank.sh"
for sig in TERM USR1; do
  rm -f "$work"/ready.*
  OUT=$work "$gpurun" --scheduler local --launcher mpirun -n 2 --max-restarts 2 \
    -- "$work/rank.sh" 2>"$work/log" &
  pid=$!
  for _ in $(seq 200); do [[ $(ls "$work"/ready.* 2>/dev/null | wc -l) == 2 ]] && break; sleep 0.05; done
  [[ $(ls "$work"/ready.* 2>/dev/null | wc -l) == 2 ]] || fail "$sig: ranks did not start"
  kill -"$sig" "$pid"
  rc=0
  wait "$pid" || rc=$?
  want=0
  [[ $sig == TERM ]] && want=143  # the rank's shell dies of the forwarded TERM
  [[ $rc == "$want" ]] || fail "$sig: exit $rc, want $want"
  ! grep -q "restarting" "$work/log" || fail "$sig: restarted after a $sig from the user"
  [[ ! -e $work/ready.0.1 ]] || fail "$sig: a second attempt ran"
  echo "ok: SIG$sig from the user: no restart (exit $rc)"
done

# 5. A configuration error every rank sees (each calls MPI_Abort): one gpurun line names the rank
# and the abort, no Open MPI MPI_ABORT frame (issue 25, item 5); a lost wrapper was named before.
# When mpirun fails to relay the frames of ranks aborting at once (it then logs ORTE_ERROR_LOG
# lines from show_help.c instead), the one line names the rank's exit code, 5, instead.
rc=0
run -- "$beat_mpi" --steps 15 --interval-ms 20 --hang-rank all --hang-step 3 --hang abort || rc=$?
[[ $rc == 5 ]] || fail "MPI_Abort in every rank: exit $rc, want 5"
[[ $(grep -cE "^gpurun: rank [0-1] on .* (called MPI_Abort \(errorcode 5\)|exited with code 5) after .* s; stopped 1 other rank$" "$work/log") == 1 ]] ||
  fail "MPI_Abort in every rank: not one line naming the abort"
! grep -q "MPI_ABORT was invoked\|more process.* sent help message\|show_help.c" "$work/log" ||
  fail "MPI_Abort: Open MPI's frame (or what is left of it) reached the terminal"
echo "ok: MPI_Abort in every rank: $(grep 'MPI_Abort' "$work/log" | sed 's/^gpurun: //')"

# 6. --nnodes 1 on one node: the node cannot be left out (none would be left): said, and all
#    ranks restart on the same node.
host=$("$gpurun" info --json --scheduler local | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["host"])')
run --nnodes 1 --max-restarts 1 -- "$beat_mpi" --steps 15 --interval-ms 20 --hang-rank 1 \
  --hang-step 5 --hang kill --on-attempt 0 >/dev/null || fail "--nnodes 1, rank killed once: exit $?"
grep -Fxq "gpurun: cannot leave $host out: 0 nodes would be left, fewer than --nnodes 1 allows" "$work/log" ||
  fail "--nnodes 1: no line saying the node cannot be left out"
grep -q "rank 1 on $host was killed by signal 9 (SIGKILL) after .* s: restarting all 2 ranks (restart 1 of 1)" \
  "$work/log" || fail "--nnodes 1: not restarted on the same node"
! grep -q "was left out" "$work/log" || fail "--nnodes 1: a node was said to be left out"
echo "ok: --nnodes 1: $(grep 'cannot leave' "$work/log" | sed 's/^gpurun: //'); restarted on the same node"

#!/usr/bin/env bash
# Signals: SIGUSR1 and SIGUSR2 sent to gpurun reach every rank; SIGTERM is forwarded so ranks
# can checkpoint and exit 0, and gpurun then exits 0; Ctrl-C in a terminal (tmux) is said as the
# user's stop.
set -euo pipefail
gpurun=$1
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
cat > "$out/rank.sh" <<'R'
#!/usr/bin/env bash
for s in USR1 USR2; do trap "echo $s >> $OUT/got.\$RANK" $s; done
trap 'echo TERM >> $OUT/got.$RANK; exit 0' TERM
touch "$OUT/ready.$RANK"
for i in $(seq 600); do sleep 0.05; done
exit 1
R
chmod +x "$out/rank.sh"

wait_for() {  # wait_for COUNT GLOB WHAT
  for _ in $(seq 200); do
    [[ $(ls $2 2>/dev/null | wc -l) -ge $1 ]] && return 0
    sleep 0.05
  done
  echo "FAIL: timed out waiting for $3"; ls "$out"; exit 1
}

for engine in mpirun local; do
  rm -f "$out"/got.* "$out"/ready.*
  OUT=$out "$gpurun" --scheduler local --launcher $engine -n 4 -- "$out/rank.sh" 2>"$out/log" &
  pid=$!
  wait_for 4 "$out/ready.*" "4 ranks to start ($engine)"
  kill -USR1 $pid; sleep 0.3
  kill -USR2 $pid; sleep 0.3
  kill -TERM $pid
  rc=0; wait $pid || rc=$?
  [[ $rc == 0 ]] || { echo "FAIL($engine): gpurun exited $rc after forwarded SIGTERM"; cat "$out/log"; exit 1; }
  for r in 0 1 2 3; do
    got=$(tr '\n' ' ' < "$out/got.$r")
    [[ $got == "USR1 USR2 TERM " ]] || { echo "FAIL($engine): rank $r got '$got'"; exit 1; }
  done
  echo "ok: $engine forwarded USR1, USR2, TERM to all 4 ranks"
done

# Time limit: with 6 s left and --checkpoint-before 4, every rank gets SIGUSR1 about 2 s in (or,
# on a machine too slow to start both ranks by then, 5 s after they started).
rm -f "$out"/got.* "$out"/ready.*
start=$(date +%s.%N)
OUT=$out "$gpurun" --scheduler local -n 2 --time-left 6 --checkpoint-before 4 -- "$out/rank.sh" 2>"$out/log" &
pid=$!
wait_for 2 "$out/got.*" "the checkpoint signal before the time limit"
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
kill -TERM $pid; wait $pid || true
grep -Eq "sending SIGUSR1 to all ranks to checkpoint|forwarding the SIGUSR1 that came before" "$out/log" ||
  { echo "FAIL: no checkpoint line"; cat "$out/log"; exit 1; }
awk -v s="$secs" 'BEGIN { exit !(s >= 1.8 && s < 9) }' || { echo "FAIL: checkpoint signal after $secs s"; exit 1; }
for r in 0 1; do head -1 "$out/got.$r" | grep -qx USR1 || { echo "FAIL: rank $r first got $(head -1 "$out/got.$r")"; exit 1; }; done
echo "ok: checkpoint signal reached both ranks ${secs}s into a job with 6 s left"

# --requeue outside a scheduler: after a checkpoint signal and a clean exit there is nothing to
# requeue into; gpurun says so and exits 0.
rm -f "$out"/got.* "$out"/ready.*
OUT=$out "$gpurun" --scheduler local --requeue -n 2 -- "$out/rank.sh" 2>"$out/log" &
pid=$!
wait_for 2 "$out/ready.*" "2 ranks to start (--requeue)"
kill -USR1 $pid; sleep 0.3; kill -TERM $pid
rc=0; wait $pid || rc=$?
[[ $rc == 0 ]] || { echo "FAIL: --requeue run exited $rc"; cat "$out/log"; exit 1; }
grep -q -- "--requeue: no requeue command for a local job" "$out/log" || { echo "FAIL: no --requeue note"; cat "$out/log"; exit 1; }
echo "ok: --requeue without a scheduler says there is nothing to requeue into"

# A rank that is a script running its program as a child (no exec): when gpurun stops the ranks
# after rank 1 failed, the TERM to the group ends the shell at once, and the program under it gets
# the rest of the kill grace to save its checkpoint (it was killed with the shell before).
cat > "$out/outer.sh" <<'R'
#!/bin/sh
[ "$RANK" = 1 ] && { sleep 0.5; exit 3; }
"$OUT/inner.sh"
R
cat > "$out/inner.sh" <<'R'
#!/usr/bin/env bash
trap 'sleep 1; echo saved > $OUT/ck.$RANK; exit 0' TERM
for i in $(seq 600); do sleep 0.05; done
R
chmod +x "$out/outer.sh" "$out/inner.sh"
for engine in mpirun local; do
  rm -f "$out"/ck.*
  rc=0
  OUT=$out timeout 60 "$gpurun" --scheduler local --launcher $engine -n 2 -- "$out/outer.sh" 2>"$out/log" || rc=$?
  [[ $rc == 3 && $(cat "$out/ck.0" 2>/dev/null) == saved ]] ||
    { echo "FAIL($engine): rank 0's program under its shell did not save on the stop (gpurun exited $rc)"; cat "$out/log"; exit 1; }
  echo "ok: $engine: after rank 1 failed, rank 0's program under its shell saved within the kill grace"
done

# A checkpoint signal due before the programs run (1 s left, --checkpoint-before 3) is not lost:
# it goes out once they all run, and each rank checkpoints and exits 0.
rm -f "$out"/got.* "$out"/ready.*
rc=0
OUT=$out timeout 60 "$gpurun" --scheduler local -n 2 --time-left 1 --checkpoint-before 3 -- "$out/rank.sh" \
  2>"$out/log" &
pid=$!
wait_for 2 "$out/got.*" "the checkpoint signal that fell due before the ranks ran"
kill -TERM $pid; wait $pid || true
grep -q "forwarding the SIGUSR1 that came before every rank's program started" "$out/log" ||
  { echo "FAIL: no line about the early checkpoint signal"; cat "$out/log"; exit 1; }
for r in 0 1; do head -1 "$out/got.$r" | grep -qx USR1 || { echo "FAIL: rank $r first got $(head -1 "$out/got.$r")"; exit 1; }; done
echo "ok: a checkpoint signal due before the ranks ran reached both once they did"
# ... whatever the signal: a TERM chosen as --checkpoint-signal waits too (it is no user's stop).
rm -f "$out"/got.*
rc=0
OUT=$out timeout 60 "$gpurun" --scheduler local -n 2 --time-left 1 --checkpoint-before 3 \
  --checkpoint-signal TERM -- "$out/rank.sh" 2>"$out/log" || rc=$?
[[ $rc == 0 && $(cat "$out/got.0" "$out/got.1" 2>/dev/null | tr '\n' ' ') == "TERM TERM " ]] ||
  { echo "FAIL: --checkpoint-signal TERM due before the start: exit $rc"; cat "$out/log"; exit 1; }
echo "ok: --checkpoint-signal TERM due before the ranks ran reached both once they did (exit 0)"

# SIGINT while the ranks start (an mpirun that takes 3 s to start them) stops the launch at
# once, with 130; it was forwarded to nobody and the ranks started anyway.
mkdir -p "$out/slow"
printf '#!/bin/sh\nsleep 3\nexec %s "$@"\n' "$(command -v mpirun)" >"$out/slow/mpirun"
chmod +x "$out/slow/mpirun"
rc=0
OUT=$out PATH="$out/slow:$PATH" "$gpurun" --scheduler local --launcher mpirun -n 2 -- "$out/rank.sh" \
  2>"$out/log" &
pid=$!
sleep 1
kill -INT $pid
start=$SECONDS
wait $pid || rc=$?
[[ $rc == 130 ]] && ((SECONDS - start < 10)) ||
  { echo "FAIL: SIGINT during the start: gpurun exited $rc after $((SECONDS - start)) s"; cat "$out/log"; exit 1; }
echo "ok: SIGINT during the start stopped the launch in $((SECONDS - start)) s with 130"

# --kill-grace is the ranks' time from TERM to KILL when gpurun stops them after a failure.
cat > "$out/slow_stop.sh" <<'R'
#!/usr/bin/env bash
[[ $RANK == 1 ]] && { sleep 0.5; exit 3; }
trap "sleep $SAVE_SECONDS; echo saved > $OUT/ck.0; exit 0" TERM
for i in $(seq 600); do sleep 0.05; done
R
chmod +x "$out/slow_stop.sh"
for grace_save in "8 6 saved" "1 3 killed"; do
  read -r grace save want <<<"$grace_save"
  rm -f "$out"/ck.*
  start=$SECONDS
  rc=0
  OUT=$out SAVE_SECONDS=$save timeout 60 "$gpurun" --scheduler local -n 2 --kill-grace "$grace" -- \
    "$out/slow_stop.sh" 2>"$out/log" || rc=$?
  got=killed; [[ -f $out/ck.0 ]] && got=saved
  [[ $rc == 3 && $got == "$want" ]] ||
    { echo "FAIL: --kill-grace $grace, a TERM handler of $save s: rank 0 $got, gpurun exited $rc"; cat "$out/log"; exit 1; }
  echo "ok: --kill-grace $grace: rank 0's $save s TERM handler $got; gpurun exited 3 in $((SECONDS - start)) s"
done

# Issue 25, item 2: Ctrl-C is a stop the user asked for, not a rank failure. A real terminal
# (tmux) sends SIGINT to gpurun's process group; the Python ranks die of it (KeyboardInterrupt);
# gpurun says so in one line and exits 130 (it said "rank 1 on vm was killed by signal 2 (SIGINT);
# stopped 1 other rank"). Then a SIGINT that reaches one rank's process group alone (a terminal of
# its own) is passed on to the others and said the same way.
cat > "$out/sleepy.py" <<'PY'
import os, time
open(os.path.join(os.environ["OUT"], "ready." + os.environ["RANK"]), "w").close()
time.sleep(120)
PY
sock=$out/tmux.sock
for engine in mpirun local; do
  rm -f "$out"/ready.* "$out/ctrlc.rc"
  env -u TMUX TERM=xterm tmux -S "$sock" new-session -d -x 200 -y 20 \
    "OUT='$out' '$gpurun' --scheduler local --launcher $engine -n 2 -- python3 '$out/sleepy.py' 2>'$out/ctrlc.log'; echo \$? >'$out/ctrlc.rc'"
  wait_for 2 "$out/ready.*" "2 ranks to start under tmux ($engine)"
  tmux -S "$sock" send-keys C-c
  wait_for 1 "$out/ctrlc.rc" "gpurun to end after Ctrl-C ($engine)"
  tmux -S "$sock" kill-server 2>/dev/null || true
  rc=$(cat "$out/ctrlc.rc")
  [[ $rc == 130 ]] && grep -qF "gpurun: stopped as the user asked (SIGINT, Ctrl-C): 2 of 2 ranks ended by it" "$out/ctrlc.log" &&
    ! grep -q "was killed by signal" "$out/ctrlc.log" ||
    { echo "FAIL($engine): Ctrl-C: gpurun exited $rc, said:"; cat "$out/ctrlc.log"; exit 1; }
  echo "ok: $engine: Ctrl-C in a terminal is said as the user's stop (exit 130)"
done
rm -f "$out"/ready.*
OUT=$out "$gpurun" --scheduler local --launcher local -n 2 -- sh -c 'echo $$ >"$OUT/pid.$RANK"; exec python3 "$0"' \
  "$out/sleepy.py" 2>"$out/log" &
pid=$!
wait_for 2 "$out/ready.*" "2 ranks to start"
kill -INT -- "-$(cat "$out/pid.1")"  # rank 1's program leads its own process group
rc=0; wait $pid || rc=$?
[[ $rc == 130 ]] && grep -qF "stopped as the user asked (SIGINT, Ctrl-C): 2 of 2 ranks ended by it" "$out/log" ||
  { echo "FAIL: a SIGINT to rank 1's group: gpurun exited $rc, said:"; cat "$out/log"; exit 1; }
echo "ok: a SIGINT that reached one rank's group stops the others and is said as the user's stop"

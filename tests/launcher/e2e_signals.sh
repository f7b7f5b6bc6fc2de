#!/usr/bin/env bash
# Signals: SIGUSR1 and SIGUSR2 sent to gpurun reach every rank; SIGTERM is forwarded so ranks
# can checkpoint and exit 0, and gpurun then exits 0.
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

# Time limit: with 3 s left and --checkpoint-before 2, every rank gets SIGUSR1 about 1 s in.
rm -f "$out"/got.* "$out"/ready.*
start=$(date +%s.%N)
OUT=$out "$gpurun" --scheduler local -n 2 --time-left 3 --checkpoint-before 2 -- "$out/rank.sh" 2>"$out/log" &
pid=$!
wait_for 2 "$out/got.*" "the checkpoint signal before the time limit"
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
kill -TERM $pid; wait $pid || true
grep -q "sending SIGUSR1 to all ranks to checkpoint" "$out/log" || { echo "FAIL: no checkpoint line"; cat "$out/log"; exit 1; }
awk -v s="$secs" 'BEGIN { exit !(s >= 0.8 && s < 5) }' || { echo "FAIL: checkpoint signal after $secs s"; exit 1; }
for r in 0 1; do head -1 "$out/got.$r" | grep -qx USR1 || { echo "FAIL: rank $r first got $(head -1 "$out/got.$r")"; exit 1; }; done
echo "ok: checkpoint signal reached both ranks ${secs}s into a job with 3 s left"

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

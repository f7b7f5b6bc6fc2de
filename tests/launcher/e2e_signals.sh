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

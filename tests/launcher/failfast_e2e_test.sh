#!/usr/bin/env bash
# Fail-fast: one of 4 ranks exits 3 (or is SIGKILLed) while the others sleep 300 s. gpurun must
# exit with that rank's status in under 15 s, name the rank, and leave no rank process behind.
set -euo pipefail
gpurun=$1
tag="gpurun-failfast-$$-rank"  # delimited: pid 12's tag is no substring of pid 123's
log=$(mktemp); trap 'rm -f "$log"; pkill -f "$tag" || true' EXIT

alive() {  # live (non-zombie) processes carrying our tag
  ps -eo stat=,args= | awk -v t="$tag" '$1 !~ /^Z/ && index($0, t) && !index($0, "awk")' | grep -v pgrep || true
}

check() {
  local engine=$1 action=$2 want_rc=$3 want_msg=$4
  local start end rc=0
  start=$(date +%s.%N)
  "$gpurun" --scheduler local --launcher "$engine" -n 4 -- bash -c \
    "if [ \$RANK = 2 ]; then sleep 1; $action; fi; exec -a $tag sleep 300" 2>"$log" || rc=$?
  end=$(date +%s.%N)
  local secs; secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
  [[ $rc == "$want_rc" ]] || { echo "FAIL($engine/$action): exit $rc, want $want_rc"; cat "$log"; exit 1; }
  awk -v s="$secs" 'BEGIN { exit !(s < 15) }' || { echo "FAIL($engine/$action): took $secs s"; exit 1; }
  grep -q "$want_msg" "$log" || { echo "FAIL($engine/$action): no '$want_msg' in:"; cat "$log"; exit 1; }
  for _ in $(seq 50); do [[ -z $(alive) ]] && break; sleep 0.1; done
  [[ -z $(alive) ]] || { echo "FAIL($engine/$action): rank processes left:"; alive; exit 1; }
  echo "ok: $engine/$action -> exit $rc in ${secs}s: $(grep 'rank 2' "$log")"
}

for engine in mpirun local; do
  check $engine "exit 3" 3 "rank 2 on .* exited with code 3 after .* s; stopped 3 other ranks"
  check $engine 'kill -9 $$' 137 "rank 2 on .* was killed by signal 9 (SIGKILL)"
done

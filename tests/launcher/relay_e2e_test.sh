#!/usr/bin/env bash
# Node relays (launcher README, "Control plane"): 4 ranks on one node reach gpurun through one
# relay connection (4 without it, GPURUN_CONTROL_RELAY=0); a rank's wrapper that dies is that
# rank lost, and the relay dying (killed, or with the wrapper that forked it) is every rank of
# the node lost. Each is detected in under 15 s, named, and leaves no rank process behind.
set -euo pipefail
gpurun=$1
tag="gpurun-relay-e2e-$$-rank"  # delimited: pid 12's tag is no substring of pid 123's
dir=$(mktemp -d)
gp=
cleanup() {
  [[ -n $gp ]] && kill -9 "$gp" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

alive() {  # live (non-zombie) rank programs carrying our tag
  ps -eo stat=,args= | awk -v t="$tag" '$1 !~ /^Z/ && index($0, t) && !index($0, "awk")' || true
}
relay_pid() {  # the node's relay: the child of one of our wrappers named gpurun-relay
  local w
  for w in "$dir"/wrapper.*; do
    pgrep -P "$(cat "$w")" -x gpurun-relay || true
  done | head -1
}

# Starts 4 ranks (each writes its wrapper's pid, then sleeps) and waits until all run.
start() {
  local engine=$1
  rm -f "$dir"/ready.* "$dir"/wrapper.*
  "$gpurun" --scheduler local --launcher "$engine" -n 4 -- bash -c \
    "echo \$PPID > $dir/wrapper.\$RANK; touch $dir/ready.\$RANK; exec -a $tag sleep 300" \
    2>"$dir/log" &
  gp=$!
  for _ in $(seq 150); do
    [[ $(find "$dir" -name 'ready.*' | wc -l) == 4 ]] && return 0
    sleep 0.1
  done
  echo "FAIL($engine): the ranks did not start"; cat "$dir/log"; exit 1
}

# Waits for gpurun; checks its status, its message, the time since `t0`, no rank left.
finish() {
  local what=$1 t0=$2 want_rc=$3 want_msg=$4 rc=0
  wait "$gp" || rc=$?
  gp=
  local secs; secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  [[ $rc == "$want_rc" ]] || { echo "FAIL($what): exit $rc, want $want_rc"; cat "$dir/log"; exit 1; }
  awk -v s="$secs" 'BEGIN { exit !(s < 15) }' || { echo "FAIL($what): took $secs s"; exit 1; }
  grep -q "$want_msg" "$dir/log" || { echo "FAIL($what): no '$want_msg' in:"; cat "$dir/log"; exit 1; }
  for _ in $(seq 50); do [[ -z $(alive) ]] && break; sleep 0.1; done
  [[ -z $(alive) ]] || { echo "FAIL($what): rank processes left:"; alive; exit 1; }
  echo "ok: $what -> exit $rc in ${secs}s: $(grep -m1 'rank ' "$dir/log")"
}

# gpurun's established TCP connections (the control connections: its other sockets listen).
connections() { ss -Htnp state established | grep -c "pid=$gp," || true; }

for engine in mpirun local; do
  start $engine
  n=$(connections)
  [[ $n == 1 ]] || { echo "FAIL($engine): gpurun holds $n control connections, want 1 (one relay)"; exit 1; }
  [[ -n $(relay_pid) ]] || { echo "FAIL($engine): no gpurun-relay process"; ps -ef; exit 1; }
  kill -TERM "$gp"
  finish "$engine/one connection" "$(date +%s.%N)" 143 "forwarding SIGTERM"
  echo "ok: $engine: 4 ranks, 1 control connection"

  GPURUN_CONTROL_RELAY=0 start $engine
  n=$(connections)
  [[ $n == 4 ]] || { echo "FAIL($engine): GPURUN_CONTROL_RELAY=0 gave $n connections, want 4"; exit 1; }
  kill -TERM "$gp"
  finish "$engine/GPURUN_CONTROL_RELAY=0" "$(date +%s.%N)" 143 "forwarding SIGTERM"

  # A wrapper that is not the relay's parent: its rank alone is lost.
  start $engine
  relay=$(relay_pid)
  parent=$(ps -o ppid= -p "$relay" | tr -d ' ')
  for r in 0 1 2 3; do [[ $(cat "$dir/wrapper.$r") != "$parent" ]] && break; done
  t0=$(date +%s.%N); kill -9 "$(cat "$dir/wrapper.$r")"
  finish "$engine/wrapper of rank $r killed" "$t0" 137 \
    "rank $r on .* was lost (its wrapper ended without reporting: killed?)"

  # The relay itself, then the wrapper that forked it: the whole node is lost.
  start $engine
  t0=$(date +%s.%N); kill -9 "$(relay_pid)"
  finish "$engine/relay killed" "$t0" 137 "was lost with its node's control relay (the relay on"
  start $engine
  relay=$(relay_pid)
  t0=$(date +%s.%N); kill -9 "$(ps -o ppid= -p "$relay" | tr -d ' ')"
  # Its own rank's end may reach gpurun first (the relay reads that connection close before
  # PR_SET_PDEATHSIG ends it): either loss names a rank; the rest of the node follows.
  finish "$engine/relay's wrapper killed" "$t0" 137 "rank [0-3] on .* was lost"
  gone() { [[ $(ps -o stat= -p "$relay" | tr -d ' ') != [^Z]* ]]; }  # absent, or a zombie
  for _ in $(seq 50); do gone && break; sleep 0.1; done
  gone || { echo "FAIL($engine): the relay outlived its wrapper"; ps -o pid,stat,args -p "$relay"; exit 1; }
done

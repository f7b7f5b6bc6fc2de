#!/usr/bin/env bash
# gpuq run and gpuq alloc as a user at a real terminal (issue 29, item 1 and 2): tmux gives the
# user a terminal, send-keys types, capture-pane reads the screen. The daemon runs as root on one
# fake GPU (the nvidia-smi-4gpu fixture, --gpus 0); the user is a second Unix user created here.
#   run_tmux_test.sh GPUQ FIXTURES_DIR
# Checks:
#   - gpuq run --pty --gres=gpu:1 bash: a prompt, CUDA_VISIBLE_DEVICES set, a terminal of its own,
#     the window size followed;
#   - Ctrl-C reaches the foreground program (sleep dies), not gpuq (the session goes on);
#   - exit N frees the GPU and gpuq run exits N; the session is in gpuq history with its GPUs;
#   - a gpuq run killed with SIGKILL frees the GPU within 5 s and leaves no process behind;
#   - a terminal that closes under gpuq run without a SIGHUP for it (setsid, su -c) ends the
#     session: the job gets SIGHUP, and one that ignores it is cancelled 5 s later;
#   - gpuq alloc: a shell in the job, which runs what was typed while the job waited; leaving it
#     frees the GPUs;
#   - from a script: --pty refuses; without it stdin, stdout and the exit status pass through,
#     also across a kill -9 and restart of the daemon;
#   - while the GPU is held, gpuq run says where it stands, then starts when the GPU is free;
#     one killed while it waits leaves the queue within 5 s, CANCELLED, the GPU still held.
set -euo pipefail
GPUQ=$(readlink -f "$1")
FIXTURES=$(readlink -f "$2")
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (a second Unix user, a root daemon)"; exit 77; }
command -v tmux >/dev/null || { echo "SKIP: no tmux"; exit 77; }

WORK=$(mktemp -d /tmp/gpuq-run-XXXXXX)
chmod 755 "$WORK"
SOCK=$WORK/gpuq.sock
U=gqr$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
DAEMON_PID=
cleanup() {
  set +e
  runuser -u "$U" -- tmux -S "$WORK/home/tmux.sock" kill-server 2>/dev/null
  for id in $(GPUQ_SOCKET=$SOCK "$GPUQ" queue --noheader 2>/dev/null | awk '{print $1}'); do
    GPUQ_SOCKET=$SOCK "$GPUQ" cancel "$id" >/dev/null 2>&1
  done
  sleep 0.5
  [ -n "$DAEMON_PID" ] && { kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null; }
  pkill -9 -u "$U" 2>/dev/null
  userdel "$U" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
useradd -M -d "$WORK/home" -s /bin/bash "$U"
mkdir -p "$WORK/home" && chown "$U" "$WORK/home"

fail() { echo "FAIL: $*" >&2; echo "--- screen:" >&2; screen >&2 || true; exit 1; }
gpuq() { GPUQ_SOCKET=$SOCK "$GPUQ" "$@"; }
as_user() { (cd "$WORK/home" && runuser -u "$U" -- env HOME="$WORK/home" GPUQ_SOCKET="$SOCK" "$@"); }
tm() { runuser -u "$U" -- tmux -S "$WORK/home/tmux.sock" "$@"; }
screen() { tm capture-pane -p -t s -S -200; }
# until_screen SECONDS REGEX: waits for the screen to match.
until_screen() {
  local end=$((SECONDS + $1))
  until screen | grep -Eq -- "$2"; do
    [ $SECONDS -lt "$end" ] || fail "waited $1 s for the screen to show /$2/"
    sleep 0.2
  done
}
until_true() {  # until_true SECONDS WHAT CMD...
  local end=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt "$end" ] || fail "waited for $what"
    sleep 0.1
  done
}
queue_empty() { [ -z "$(gpuq queue --noheader)" ]; }
running() { gpuq queue --noheader | grep -q ' R '; }
start_daemon() {
  GPURUN_NVIDIA_SMI=$FIXTURES/nvidia-smi/nvidia-smi-4gpu "$GPUQ" daemon --gpus 0 \
    --state-dir "$WORK/state" --socket "$SOCK" --sample-interval 1 2>> "$WORK/daemon.log" &
  DAEMON_PID=$!
  until_true 20 "the daemon to answer" gpuq queue
}
start_daemon
# A terminal for the user, in which gpuq run runs; the shell after it shows gpuq run's status.
session() {
  tm kill-server 2>/dev/null || true
  tm new-session -d -s s -x 100 -y 30 \
    "cd $WORK/home; env GPUQ_SOCKET=$SOCK HOME=$WORK/home PS1='PROMPT\$ ' $*; echo CLIENT-EXIT=\$?; sleep 600"
}

echo "== gpuq run --pty: prompt, GPU, terminal, window size"
session "$GPUQ" run --pty --gres=gpu:1 -J tmuxrun bash --norc -i
until_screen 20 'PROMPT\$'
tm send-keys -t s 'echo CVD=$CUDA_VISIBLE_DEVICES JOB=$SLURM_JOB_ID; tty; stty size' Enter
until_screen 10 '^CVD=0 JOB=[0-9]+'
screen | grep -Eq '^/dev/pts/[0-9]+' || fail "the job has no terminal of its own"
screen | grep -q '^30 100' || fail "the job's terminal is not the window's size (30 100)"
tm resize-window -t s -x 90 -y 25
sleep 0.5
tm send-keys -t s 'stty size' Enter
until_screen 10 '^25 90'
JOB=$(screen | sed -n 's/^CVD=0 JOB=\([0-9]*\).*/\1/p' | head -1)
[ "$(gpuq show "$JOB" | grep -c 'JobState=RUNNING')" = 1 ] || fail "job $JOB is not RUNNING"

echo "== Ctrl-C reaches the foreground program, not gpuq"
tm send-keys -t s 'sleep 1000' Enter
until_true 10 "sleep 1000 to run" pgrep -u "$U" -x sleep
tm send-keys -t s C-c
tm send-keys -t s 'echo SLEEP-STATUS=$?' Enter
until_screen 10 '^SLEEP-STATUS=130'
pgrep -u "$U" -x sleep >/dev/null && fail "sleep survived Ctrl-C"
pgrep -u "$U" -f "gpuq run" >/dev/null || fail "Ctrl-C killed gpuq run itself"
gpuq show "$JOB" | grep -q 'JobState=RUNNING' || fail "the session ended on Ctrl-C"

echo "== exit frees the GPU; gpuq run exits with the shell's status"
tm send-keys -t s 'exit 3' Enter
until_screen 10 '^CLIENT-EXIT=3'
until_true 5 "the GPU to be free after exit" queue_empty
hist=$(gpuq history --json -a | python3 -c "
import json, sys
j = [d for d in json.load(sys.stdin) if d['job_id'] == $JOB][0]
print(j['state'], j['exit_code'], j['gpus'], j['interactive'], j['end_ms'] > j['start_ms'] > 0)")
[ "$hist" = "FAILED 3 [0] True True" ] || fail "history of job $JOB: $hist"
gpuq history -a | grep -Eq "^$JOB +tmuxrun +$U +FAILED +3:0 .* 1 +[0-9]+\.[0-9]+ " ||
  fail "gpuq history has no GPU-hours row for job $JOB: $(gpuq history -a)"

echo "== a killed client frees the GPU within 5 s"
session "$GPUQ" run --pty --gres=gpu:1 bash --norc -i
until_screen 20 'PROMPT\$'
tm send-keys -t s 'sleep 1000 & sleep 1001' Enter
sleeps() { pgrep -u "$U" -x sleep | wc -l; }
two_sleeps() { [ "$(sleeps)" = 2 ]; }
no_sleeps() { [ "$(sleeps)" = 0 ]; }
until_true 10 "both sleeps to run" two_sleeps
pkill -9 -u "$U" -f "gpuq run"
t0=$SECONDS
until_true 5 "the GPU to be free 5 s after kill -9 of gpuq run" queue_empty
echo "freed in about $((SECONDS - t0)) s"
until_true 5 "the session's processes to be gone" no_sleeps
gpuq history -a | grep -Eq " CANCELLED " || fail "the killed session is not CANCELLED in history"

echo "== a terminal closed under gpuq run, with no SIGHUP for it, ends the session"
# su -c and setsid put gpuq run in a session of its own: when the window closes its reads of the
# terminal fail and no SIGHUP comes. The job ignores SIGHUP here, so only gpuq run's leaving
# (after 5 s of grace) ends it. Before, gpuq run polled on and the GPU stayed held for good.
printf '#!/bin/bash\ntrap "" HUP\necho HUP-IGNORED\nexec sleep 1002\n' > "$WORK/home/hupjob.sh"
chmod 755 "$WORK/home/hupjob.sh"
session setsid -w "$GPUQ" run --pty --gres=gpu:1 "$WORK/home/hupjob.sh"
until_screen 20 '^HUP-IGNORED'
HUPJOB=$(gpuq queue --noheader | awk '{print $1}')
tm kill-server
t0=$SECONDS
until_true 20 "the GPU to be free after the terminal closed" queue_empty
echo "freed in about $((SECONDS - t0)) s"
no_client() { ! pgrep -u "$U" -f "gpuq run" >/dev/null; }
until_true 5 "gpuq run to leave" no_client
gpuq history -a --noheader | grep -Eq "^ *$HUPJOB .* CANCELLED " ||
  fail "job $HUPJOB is not CANCELLED: $(gpuq history -a)"

echo "== gpuq alloc: a shell in the job; what was typed while it waited reaches that shell"
# The command is typed while the job waits for the GPU, before gpuq alloc puts the terminal in raw
# mode: a flush there (TCSAFLUSH) dropped it, and CI once typed it just too early.
HOLD=$(cd "$WORK" && gpuq submit --parsable --gres=gpu:1 -t 10 --wrap 'sleep 300')
until_true 10 "the batch job to run" running
session env SHELL=/bin/bash "$GPUQ" alloc --gres=gpu:1
until_screen 20 'queued: position 1'
tm send-keys -t s 'echo ALLOC=$SLURM_JOB_ID:$CUDA_VISIBLE_DEVICES' Enter
until_screen 10 '^echo ALLOC='
gpuq cancel "$HOLD"
until_screen 20 '^ALLOC=[0-9]+:0'
tm send-keys -t s 'exit' Enter
until_screen 10 '^CLIENT-EXIT=0'
until_true 5 "the GPU to be free after leaving gpuq alloc's shell" queue_empty

echo "== from a script: --pty refuses, without it everything passes through"
set +e
err=$(as_user "$GPUQ" run --pty true < /dev/null 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q 'needs a terminal' <<< "$err" || fail "--pty without a terminal: rc $rc, $err"
set +e
out=$(echo hello | as_user "$GPUQ" run --gres=gpu:1 -- sh -c 'read x; echo "got $x on $CUDA_VISIBLE_DEVICES"; echo oops >&2; exit 5' 2> "$WORK/err"); rc=$?
set -e
[ "$out" = "got hello on 0" ] && [ $rc -eq 5 ] && grep -qx oops "$WORK/err" ||
  fail "stdin/stdout/stderr/status through gpuq run: out '$out' rc $rc err '$(cat "$WORK/err")'"

echo "== the session survives kill -9 and restart of the daemon"
as_user "$GPUQ" run --gres=gpu:1 -- sh -c 'sleep 3; echo survived; exit 4' > "$WORK/out" 2>&1 &
CLIENT=$!
until_true 10 "the job to run" running
kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null || true
start_daemon
set +e; wait "$CLIENT"; rc=$?; set -e
[ $rc -eq 4 ] && grep -qx survived "$WORK/out" || fail "after a daemon restart: rc $rc, $(cat "$WORK/out")"
until_true 10 "the GPU to be free after the restart" queue_empty

echo "== while the GPU is held, gpuq run says where it stands, then starts"
HOLD=$(cd "$WORK" && gpuq submit --parsable --gres=gpu:1 -t 10 --wrap 'sleep 300')  # its output in WORK
until_true 10 "the batch job to run" running
as_user "$GPUQ" run --gres=gpu:1 -- echo ran-after-wait > "$WORK/out" 2> "$WORK/err" &
CLIENT=$!
until_true 15 "gpuq run to say where it stands" grep -Eq 'queued: position 1 \(Resources\)' "$WORK/err"
as_user "$GPUQ" run --gres=gpu:1 -- echo never > "$WORK/out2" 2> "$WORK/err2" &
until_true 15 "a second gpuq run to wait" grep -Eq 'queued: position 2' "$WORK/err2"
ABANDONED=$(sed -n 's/^gpuq: job \([0-9]*\) queued.*/\1/p' "$WORK/err2" | head -1)
[ -n "$ABANDONED" ] || fail "no job id in: $(cat "$WORK/err2")"
pkill -9 -u "$U" -f "gpuq run --gres=gpu:1 -- echo never"
abandoned_cancelled() { gpuq history -a --noheader | grep -Eq "^ *$ABANDONED .* CANCELLED "; }
until_true 5 "job $ABANDONED, whose gpuq run was killed while it waited, to leave the queue" \
  abandoned_cancelled
running || fail "the batch job holding the GPU stopped"
gpuq queue --noheader | grep -Eq "^ *$ABANDONED " && fail "job $ABANDONED is still queued"
grep -q "gpuq run's client went away" "$WORK/daemon.log" || fail "the daemon's log does not say why"
gpuq cancel "$HOLD"
set +e; wait "$CLIENT"; rc=$?; set -e
[ $rc -eq 0 ] && grep -qx ran-after-wait "$WORK/out" && grep -q 'allocated resources' "$WORK/err" ||
  fail "the waiting gpuq run: rc $rc, out $(cat "$WORK/out"), err $(cat "$WORK/err")"
echo PASS

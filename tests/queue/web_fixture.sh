# web_fixture.sh: sourced by the gpuq web tests that drive real tools (Chromium, Prometheus'
# parser). Starts a gpuq daemon on 4 fake GPUs (GPURUN_NVIDIA_SMI = the nvidia-smi-4gpu fixture,
# or the one FAKE_GPUS names; sampling every second) and `gpuq web` on a free port, all under a
# private temp dir; everything (jobs, daemon, web server, users it created) is stopped and removed
# on exit.
#   source web_fixture.sh GPUQ FIXTURES_DIR
# Sets WORK, SOCK, PORT, URL, FAKE_NVIDIA_SMI_APPS; defines gpuq, wait_for, submit_as, make_users.
# GPUQ_DAEMON_ARGS adds options to the daemon's command line.
USERS=()
set -euo pipefail
GPUQ_BIN=$(readlink -f "$1")
FIXTURES=$(readlink -f "$2")
WORK=$(mktemp -d /tmp/gpuq-web-XXXXXX)
chmod 755 "$WORK"
SOCK=$WORK/gpuq.sock
CREATED_USERS=()
DAEMON_PID=
WEB_PID=

cleanup() {
  set +e
  if [ -n "$DAEMON_PID" ]; then
    for id in $(GPUQ_SOCKET=$SOCK "$GPUQ_BIN" queue --noheader 2>/dev/null | awk '{print $1}'); do
      GPUQ_SOCKET=$SOCK "$GPUQ_BIN" cancel "$id" >/dev/null 2>&1
    done
    for _ in $(seq 100); do  # the jobs end before the daemon goes (it would leave them running)
      [ -z "$(GPUQ_SOCKET=$SOCK "$GPUQ_BIN" queue --noheader 2>/dev/null)" ] && break
      sleep 0.1
    done
    kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null
  fi
  [ -n "$WEB_PID" ] && { kill "$WEB_PID" 2>/dev/null; wait "$WEB_PID" 2>/dev/null; }
  for u in "${CREATED_USERS[@]+"${CREATED_USERS[@]}"}"; do userdel "$u" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT

gpuq() { GPUQ_SOCKET=$SOCK "$GPUQ_BIN" "$@"; }

# wait_for SECONDS WHAT CMD...: runs CMD until it succeeds, or fails naming WHAT.
wait_for() {
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then echo "FAIL: waited ${limit} s for $what" >&2; exit 1; fi
    sleep 0.2
  done
}

# submit_as USER ARGS...: submits from USER's work dir (as that user when it is not us).
submit_as() {
  local user=$1; shift
  local dir=$WORK/home-$user
  mkdir -p "$dir"; chmod 777 "$dir"
  if [ "$user" = "$(id -un)" ]; then
    (cd "$dir" && gpuq submit --parsable "$@")
  else
    (cd "$dir" && runuser -u "$user" -- env GPUQ_SOCKET="$SOCK" "$GPUQ_BIN" submit --parsable "$@")
  fi
}

# make_users N: sets USERS to N user names; as root new throwaway users (or the names in
# GPUQ_WEB_TEST_USERS, created when missing), otherwise N times the current user. Not in a
# subshell: the users it creates are deleted on exit.
make_users() {
  local n=$1 names=()
  if [ "$(id -u)" -eq 0 ] && command -v useradd >/dev/null; then
    read -r -a names <<< "${GPUQ_WEB_TEST_USERS:-}"
    while [ ${#names[@]} -lt "$n" ]; do names+=("gqw$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"); done
    for u in "${names[@]:0:$n}"; do
      if ! id "$u" >/dev/null 2>&1; then
        useradd -M -d /nonexistent -s /bin/sh "$u"
        CREATED_USERS+=("$u")
      fi
    done
  else
    for _ in $(seq "$n"); do names+=("$(id -un)"); done
  fi
  USERS=("${names[@]:0:$n}")
}

# The compute processes the fake GPUs list (none until a test writes this file; see the fixtures'
# README), and extra daemon options from GPUQ_DAEMON_ARGS.
export FAKE_NVIDIA_SMI_APPS=$WORK/nvidia-smi-apps
read -r -a daemon_args <<< "${GPUQ_DAEMON_ARGS:-}"
GPURUN_NVIDIA_SMI=$FIXTURES/nvidia-smi/${FAKE_GPUS:-nvidia-smi-4gpu} "$GPUQ_BIN" daemon --gpus 0,1,2,3 \
  --state-dir "$WORK/state" --socket "$SOCK" --sample-interval 1 \
  "${daemon_args[@]+"${daemon_args[@]}"}" 2> "$WORK/daemon.log" &
DAEMON_PID=$!
wait_for 20 "the gpuq daemon to answer" gpuq queue
"$GPUQ_BIN" web --socket "$SOCK" --listen 127.0.0.1:0 > "$WORK/web.out" 2> "$WORK/web.err" &
WEB_PID=$!
wait_for 20 "gpuq web to say its port" grep -q '^gpuq web: serving' "$WORK/web.out"
PORT=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$WORK/web.out")
URL=http://127.0.0.1:$PORT

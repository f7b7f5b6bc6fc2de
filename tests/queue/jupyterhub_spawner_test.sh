#!/usr/bin/env bash
# JupyterHub with gpuq_spawner, end to end: a gpuq daemon (root) on ONE fake GPU (id 3 of the
# nvidia-smi-4gpu fixture), Debian's JupyterHub (root, PAM login, the shipped
# packaging/jupyterhub_config.py plus this test's ports and paths) and two throwaway Unix users
# with passwords. Headless Chromium (jupyterhub_browser.py) logs each in: bad options get the
# spawner's message above the form; the first user's server runs as a gpuq job and a cell there
# prints the GPU gpuq gave; the second user's page says it waits for a GPU with its position
# until the first stops from the hub's home page, then gets the GPU.
#   jupyterhub_spawner_test.sh GPUQ FIXTURES_DIR SOURCE_DIR
# Exit 77 (skipped) when not root (PAM login of other users and runuser need it) or when a
# package it drives is missing (scripts/install-deps.sh installs them all).
set -euo pipefail
GPUQ_BIN=$(readlink -f "$1")
FIXTURES=$(readlink -f "$2")
SRC=$(readlink -f "$3")
PY=/usr/bin/python3  # Debian's, which has jupyterhub, pamela and websocket
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "not root: PAM logins of other users and runuser need root"
for tool in useradd chpasswd runuser chromium configurable-http-proxy jupyterhub-singleuser; do
  command -v "$tool" >/dev/null || skip "no $tool (scripts/install-deps.sh installs it)"
done
"$PY" -c 'import jupyterhub, pamela, websocket, notebook, ipykernel' 2>/dev/null ||
  skip "python3 lacks jupyterhub, pamela, websocket, notebook or ipykernel (scripts/install-deps.sh)"

WORK=$(mktemp -d /tmp/gpuq-hub-XXXXXX)
chmod 755 "$WORK"
SOCK=$WORK/gpuq.sock
DAEMON_PID=; HUB_PID=; CREATED=()
gpuq() { GPUQ_SOCKET=$SOCK "$GPUQ_BIN" "$@"; }

cleanup() {
  set +e  # the trap runs under set -e too: one failed step must not skip the rest
  if [ -n "$HUB_PID" ]; then  # the hub stops its servers (cleanup_servers) and its proxy
    kill "$HUB_PID" 2>/dev/null
    for _ in $(seq 150); do kill -0 "$HUB_PID" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$HUB_PID" 2>/dev/null; wait "$HUB_PID" 2>/dev/null
  fi
  [ -f "$WORK/proxy.pid" ] && kill "$(cat "$WORK/proxy.pid")" 2>/dev/null
  if [ -n "$DAEMON_PID" ]; then
    for id in $(gpuq queue --noheader 2>/dev/null | awk '{print $1}'); do gpuq cancel "$id" >/dev/null 2>&1; done
    for _ in $(seq 200); do [ -z "$(gpuq queue --noheader 2>/dev/null)" ] && break; sleep 0.2; done
    kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null
  fi
  for u in "${CREATED[@]+"${CREATED[@]}"}"; do
    userdel -f -r "$u" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# wait_for SECONDS WHAT CMD...: runs CMD until it succeeds, or fails naming WHAT.
wait_for() {
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge "$end" ]; then echo "FAIL: waited ${limit} s for $what" >&2; exit 1; fi
    sleep 0.2
  done
}

# Two users with homes and passwords, names unique to this run.
users=(); passwords=()
for n in 1 2; do
  u=gqhub$n$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
  useradd -m -s /bin/sh "$u"
  CREATED+=("$u")
  p=pw-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
  echo "$u:$p" | chpasswd
  users+=("$u"); passwords+=("$p")
done

GPURUN_NVIDIA_SMI=$FIXTURES/nvidia-smi/nvidia-smi-4gpu "$GPUQ_BIN" daemon --gpus 3 \
  --state-dir "$WORK/state" --socket "$SOCK" --sample-interval 1 2> "$WORK/daemon.log" &
DAEMON_PID=$!
wait_for 20 "the gpuq daemon to answer" gpuq queue

# Three free ports at once (public proxy, proxy API, hub), then the hub with the shipped config.
read -r port api hubport < <("$PY" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
cat > "$WORK/jupyterhub_config.py" <<EOF
load_subconfig("$SRC/packaging/jupyterhub_config.py")
c.JupyterHub.port = $port
c.JupyterHub.hub_port = $hubport
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:$api"
c.ConfigurableHTTPProxy.pid_file = "$WORK/proxy.pid"
c.JupyterHub.db_url = "sqlite:///$WORK/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "$WORK/cookie_secret"
c.JupyterHub.pid_file = "$WORK/hub.pid"
c.JupyterHub.cleanup_servers = True
c.Authenticator.allowed_users = {"${users[0]}", "${users[1]}"}
c.GpuqSpawner.gpuq = "$GPUQ_BIN"
c.GpuqSpawner.socket = "$SOCK"
c.GpuqSpawner.status_interval = 0.5
EOF
# NODE_PATH: Debian's configurable-http-proxy finds its modules (node-commander, ...) in
# /usr/share/nodejs, which Debian's node searches by itself and NodeSource's node does not.
(cd "$WORK" && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root \
  NODE_PATH=/usr/share/nodejs PYTHONPATH="$SRC/launcher/queue/jupyterhub" "$PY" -m jupyterhub -f "$WORK/jupyterhub_config.py" \
  > "$WORK/hub.log" 2>&1) &
HUB_PID=$!
hub_up() {
  kill -0 "$HUB_PID" || { echo "FAIL: JupyterHub exited" >&2; tail -n 40 "$WORK/hub.log" >&2; exit 1; }
  "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/hub/api', timeout=5)"
}
if ! (wait_for 60 "JupyterHub on port $port" hub_up); then tail -n 40 "$WORK/hub.log"; exit 1; fi
echo "ok: JupyterHub (PAM, gpuq_spawner) on 127.0.0.1:$port, gpuq on fake GPU 3"

if ! CHROMIUM=$(command -v chromium) "$PY" "$(dirname "$0")/jupyterhub_browser.py" \
  "http://127.0.0.1:$port" "$GPUQ_BIN" "$SOCK" "$WORK" "${users[0]}" "${passwords[0]}" \
  "${users[1]}" "${passwords[1]}"; then
  echo "--- hub log (last 60 lines)"; tail -n 60 "$WORK/hub.log"
  echo "--- gpuq history"; gpuq history -a || true
  for u in "${users[@]}"; do for f in /home/"$u"/jupyterhub-gpuq-*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done; done
  exit 1
fi

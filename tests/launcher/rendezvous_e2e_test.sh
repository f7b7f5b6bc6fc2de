#!/usr/bin/env bash
# rendezvous_e2e_test.sh: the rendezvous port is held, not probed and released (CTest
# launcher_e2e_rendezvous).
#
#   tests/launcher/rendezvous_e2e_test.sh GPURUN BEAT
#
# 1. While the ranks run, MASTER_PORT is held on rank 0's host: a plain bind of it fails (nothing
#    else can take it), while the program's own SO_REUSEADDR bind and listen succeed (as
#    PyTorch's TCPStore's do), and a rank connects to it there.
# 2. When the default port is busy, rank 0's wrapper takes the next one and every rank gets it.
# 3. --master-port P that something else listens on: gpurun says so, and the ranks get P.
# 4. TF_CONFIG's worker ports are held the same way; 5. one that is taken is named, no program runs.
# Every rank also gets NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (here lo: MASTER_ADDR is 127.0.0.1),
# unless they were set.
set -euo pipefail
gpurun=$1
work=$(mktemp -d /tmp/gpurun-rdv.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; [[ -f $work/log ]] && sed 's/^/  log: /' "$work/log" >&2; exit 1; }

cat >"$work/rank.py" <<'PY'
import os, socket, sys, time
port, rank, out = int(os.environ["MASTER_PORT"]), os.environ["RANK"], sys.argv[1]
res = [os.environ["NCCL_SOCKET_IFNAME"], os.environ["GLOO_SOCKET_IFNAME"], str(port)]
if rank == "0":
    try:
        socket.socket().bind(("0.0.0.0", port)); res.append("plain-bind-succeeded")
    except OSError:
        res.append("plain-bind-refused")
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(8); res.append("reuse-listen-ok")
    open(out + ".listening", "w").close()
    c, _ = s.accept(); res.append("accepted")
else:
    for _ in range(200):
        if os.path.exists(out + ".listening"): break
        time.sleep(0.05)
    socket.create_connection(("127.0.0.1", port), timeout=5).close(); res.append("connected")
open(f"{out}.{rank}", "w").write(" ".join(res))
PY
run() { timeout 60 "$gpurun" --scheduler local -n 2 "$@" -- python3 "$work/rank.py" "$work/r" 2>"$work/log"; }

rm -f "$work"/r.*
run || fail "rendezvous run exited $?"
[[ $(cat "$work/r.0") =~ ^lo\ lo\ ([0-9]+)\ plain-bind-refused\ reuse-listen-ok\ accepted$ ]] ||
  fail "rank 0: $(cat "$work/r.0")"
port=${BASH_REMATCH[1]}
[[ $(cat "$work/r.1") == "lo lo $port connected" ]] || fail "rank 1: $(cat "$work/r.1")"
echo "ok: MASTER_PORT $port held (a plain bind refused), the program's SO_REUSEADDR listen worked"

# 2. The plan's port busy: the next free one. The plan's port for a local run is derived from
# gpurun's pid, so take the port the dry run shows for a fixed --master-port instead: busy, fixed.
python3 -c 'import socket,time,sys; s=socket.socket(); s.bind(("0.0.0.0",0)); s.listen(1); print(s.getsockname()[1], flush=True); time.sleep(120)' >"$work/busy" &
pids+=($!)
for _ in $(seq 100); do [[ -s $work/busy ]] && break; sleep 0.05; done
busy=$(cat "$work/busy")
rm -f "$work"/r.*
timeout 60 "$gpurun" --scheduler local -n 2 --master-port "$busy" -- sh -c 'echo "$MASTER_PORT" > '"$work"'/r.$RANK' 2>"$work/log" ||
  fail "--master-port $busy (taken) exited $?"
grep -q -- "--master-port $busy is taken on" "$work/log" || fail "no word about the taken port"
[[ $(cat "$work/r.0") == "$busy" && $(cat "$work/r.1") == "$busy" ]] || fail "ranks did not get $busy"
echo "ok: --master-port $busy, taken: said so, ranks got it"

# 3. The interface variables the user set are kept.
NCCL_SOCKET_IFNAME=eth9 GLOO_SOCKET_IFNAME=eth8 timeout 60 "$gpurun" --scheduler local -n 1 \
  -- sh -c 'echo "$NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME" > '"$work"'/ifn' 2>"$work/log" || fail "ifname run"
[[ $(cat "$work/ifn") == "eth9 eth8" ]] || fail "user's interfaces replaced: $(cat "$work/ifn")"
echo "ok: NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME set by the user are kept"

# 4. TF_CONFIG's worker ports are held as MASTER_PORT is (issue 32, item 4): each rank's own port
# refuses a plain bind while the ranks run, and the program's SO_REUSEADDR listen (how
# TensorFlow's gRPC server binds) works there.
cat >"$work/tf.py" <<'PY'
import json, os, socket, sys
tf = json.loads(os.environ["TF_CONFIG"])
port = int(tf["cluster"]["worker"][tf["task"]["index"]].rsplit(":", 1)[1])
res = [str(port)]
try:
    socket.socket().bind(("0.0.0.0", port)); res.append("plain-bind-succeeded")
except OSError:
    res.append("plain-bind-refused")
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port)); s.listen(1); res.append("reuse-listen-ok")
open(sys.argv[1] + "." + os.environ["RANK"], "w").write(" ".join(res))
PY
rm -f "$work"/t.*
timeout 60 "$gpurun" --scheduler local -n 2 -- python3 "$work/tf.py" "$work/t" 2>"$work/log" ||
  fail "TF port run exited $?"
for r in 0 1; do
  [[ $(cat "$work/t.$r") =~ ^[0-9]+\ plain-bind-refused\ reuse-listen-ok$ ]] ||
    fail "rank $r's TF_CONFIG port: $(cat "$work/t.$r")"
done
echo "ok: TF_CONFIG worker ports held (plain binds refused), the program's SO_REUSEADDR listen worked"

# 5. A worker port something else listens on: no program starts, and gpurun names the port.
python3 -c 'import socket,time; s=socket.socket(); s.bind(("0.0.0.0",0)); s.listen(1); print(s.getsockname()[1], flush=True); time.sleep(120)' >"$work/tfbusy" &
pids+=($!)
for _ in $(seq 100); do [[ -s $work/tfbusy ]] && break; sleep 0.05; done
tfbusy=$(cat "$work/tfbusy")
rm -f "$work/ran"
if timeout 60 "$gpurun" --scheduler local -n 1 --master-port $((tfbusy - 1)) --start-timeout 5 \
  -- touch "$work/ran" 2>"$work/log"; then
  fail "gpurun ran with TF_CONFIG's worker port $tfbusy taken"
fi
[[ ! -e $work/ran ]] || fail "the program started although its TF_CONFIG port was taken"
grep -q "TF_CONFIG's worker port $tfbusy (MASTER_PORT + 1 + local rank 0) is in use" "$work/log" ||
  fail "gpurun did not name the taken TF_CONFIG port"
# Without tf in --contract the port is no one's business.
timeout 60 "$gpurun" --scheduler local -n 1 --master-port $((tfbusy - 1)) --contract torch \
  -- touch "$work/ran" 2>"$work/log" || fail "--contract torch with port $tfbusy taken exited $?"
echo "ok: a taken TF_CONFIG port $tfbusy is named before any program starts; --contract torch runs"

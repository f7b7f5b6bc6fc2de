#!/usr/bin/env bash
# The flags of issue 30 in a real browser and through Prometheus' parser: a daemon on 4 fake GPUs
# (nvidia-smi-4gpu: 17%, 45%, 90%, 0%) where a `sleep` outside the queue (another Unix user's,
# when run as root) is listed on GPU 1, and one job holds GPU 0 below --idle-percent 20 for longer
# than --idle-minutes 0.05. Headless Chromium's DOM must show GPU 0's job flagged idle, GPU 1 as
# busy outside the queue naming the process's user, GPU 2 (90%, no job) as in use with no job, and
# GPU 3 (--shards-per-gpu 3:2) shared by a --gres=shard:1 job, its shards and job on its tile;
# /metrics must say the same. Then the process exits and GPU 1 is given out.
#   web_flags_browser_test.sh GPUQ FIXTURES_DIR
# Exit 77 (skipped) when chromium or python3's prometheus_client is missing.
chromium=$(command -v chromium || command -v chromium-browser || true)
py=
for p in /usr/bin/python3 python3; do  # Debian's, which has python3-prometheus-client
  if "$p" -c 'import prometheus_client' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$chromium" ] || [ -z "$py" ]; then
  echo "SKIP: needs chromium and python3-prometheus-client (scripts/install-deps.sh has both)"
  exit 77
fi
export FAKE_GPUS=nvidia-smi-4gpu
export GPUQ_DAEMON_ARGS="--idle-percent 20 --idle-minutes 0.05 --shards-per-gpu 3:2"
source "$(dirname "$0")/web_fixture.sh" "$1" "$2"

make_users 2
outsider_user=${USERS[1]}
if [ "$outsider_user" = "$(id -un)" ]; then
  sleep 300 & outsider=$!
else
  setpriv --reuid="$(id -u "$outsider_user")" --regid="$(id -g "$outsider_user")" --clear-groups \
    sleep 300 & outsider=$!
fi
trap 'kill $outsider 2>/dev/null || true; cleanup' EXIT  # set -e holds in traps too
echo "GPU-7a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c02, $outsider, 27900" > "$FAKE_NVIDIA_SMI_APPS.tmp"
mv "$FAKE_NVIDIA_SMI_APPS.tmp" "$FAKE_NVIDIA_SMI_APPS"

status_has() {  # status_has PYTHON-EXPRESSION-OVER-s
  "$py" - "$URL" "$1" <<'PY'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1] + "/api/status", timeout=5))
g = {x["id"]: x for x in s["gpus"]}
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
wait_for 20 "GPU 1 kept out" status_has 'g[1]["state"] == "outside"'
printf '#!/bin/sh\nsleep 120\n' > "$WORK/sleep.sh"
chmod 755 "$WORK/sleep.sh"
job=$(submit_as "${USERS[0]}" -J idle-one --gres=gpu:1 "$WORK/sleep.sh")
wait_for 30 "job $job flagged idle on GPU 0" status_has 'g[0]["state"] == "busy" and g[0]["idle"]'
shard=$(submit_as "${USERS[0]}" -J shard-one --gres=shard:1 "$WORK/sleep.sh")
wait_for 20 "job $shard on GPU 3's shards" status_has 'g[3]["state"] == "shared" and g[3]["shards"]["held"] == 1'

profile=$(mktemp -d "$WORK/chromium-XXXXXX")
timeout 90 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --dump-dom "$URL/" > "$WORK/dom.html" 2> "$WORK/chromium.log"
"$py" - "$WORK/dom.html" "$outsider" "$outsider_user" "$job" "$shard" <<'PY'
import sys
from html.parser import HTMLParser
dom, pid, user, job, shard = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]

class Tiles(HTMLParser):
    """Per GPU tile: its class, and the text under each class inside it."""
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tiles, self.stack = {}, []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        tile = a.get("id", "").startswith("gpu-") and a["id"]
        if tile: self.tiles[tile] = {"class": a.get("class", "").split(), "texts": {}}
        if tag not in ("meta", "br", "img", "input", "link", "polyline", "rect", "line"):
            self.stack.append((tag, tile, a.get("class", "")))
    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag: break
    def handle_data(self, data):
        tile = next((t for _, t, _ in reversed(self.stack) if t), None)
        if tile and data.strip():
            for _, _, cls in self.stack:
                for c in cls.split(): self.tiles[tile]["texts"].setdefault(c, []).append(data.strip())

t = Tiles(); t.feed(dom)
errors = []
def check(cond, msg):
    if not cond: errors.append(msg)
def text(tile, cls): return " ".join(t.tiles.get(tile, {"texts": {}})["texts"].get(cls, []))
def classes(tile): return t.tiles.get(tile, {"class": []})["class"]
check(len(t.tiles) == 4, f"{len(t.tiles)} GPU tiles, expected 4")
check("busy" in classes("gpu-0") and "flagged" in classes("gpu-0"), f"GPU 0 tile class {classes('gpu-0')}")
check(text("gpu-0", "idle-flag").startswith("idle: below 20"), f"GPU 0 idle flag: {text('gpu-0', 'idle-flag')!r}")
check(text("gpu-0", "job-id") == job, f"GPU 0 job {text('gpu-0', 'job-id')!r}, expected {job}")
check("outside" in classes("gpu-1"), f"GPU 1 tile class {classes('gpu-1')}")
check(text("gpu-1", "state") == "busy outside the queue", f"GPU 1 state {text('gpu-1', 'state')!r}")
use = text("gpu-1", "outside-use")
check(f"pid {pid}" in use and user in use and "sleep" in use and "27.2 GB" in use,
      f"GPU 1 does not name the process {pid} of {user}: {use!r}")
check("flagged" in classes("gpu-2") and text("gpu-2", "state") == "in use, no job",
      f"GPU 2 (90%, no job): {classes('gpu-2')} {text('gpu-2', 'state')!r}")
check("shared" in classes("gpu-3") and text("gpu-3", "shards") == "shards 1 of 2 held",
      f"GPU 3 (2 shards, one held): {classes('gpu-3')} {text('gpu-3', 'shards')!r}")
check(text("gpu-3", "shard-job").startswith(f"job {shard}") and "1 shard" in text("gpu-3", "shard-job"),
      f"GPU 3's shard job: {text('gpu-3', 'shard-job')!r}")
if errors: print("\n".join(errors)); print(dom[:4000]); sys.exit(1)
print("DOM OK: idle job, use outside the queue with its user, busy GPU with no job, shared GPU")
PY

"$py" - "$URL" "$job" "$shard" <<'PY'
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
url, job, shard = sys.argv[1], sys.argv[2], sys.argv[3]
fams = {f.name: f for f in text_string_to_metric_families(
    urllib.request.urlopen(url + "/metrics", timeout=5).read().decode())}
def values(name, key="gpu"): return {s.labels[key]: s.value for s in fams[name].samples}
errors = []
def check(cond, msg):
    if not cond: errors.append(msg)
check(values("gpuq_gpu_outside_processes") == {"0": 0, "1": 1, "2": 0, "3": 0},
      f"outside processes {values('gpuq_gpu_outside_processes')}")
check(values("gpuq_gpu_shards_total") == {"3": 2} and values("gpuq_gpu_shards_held") == {"3": 1},
      f"shards {values('gpuq_gpu_shards_total')} {values('gpuq_gpu_shards_held')}")
alloc = {s.labels["job"]: (s.labels["gpu"], s.value) for s in fams["gpuq_gpu_allocated"].samples}
check(alloc.get(shard) == ("3", 0.5) and alloc.get(job) == ("0", 1), f"allocated {alloc}")
check(values("gpuq_gpu_busy_without_job") == {"0": 0, "1": 1, "2": 1, "3": 0},
      f"busy without job {values('gpuq_gpu_busy_without_job')}")
idle = [s for s in fams["gpuq_job_gpu_idle"].samples]
check(len(idle) == 1 and idle[0].labels["job"] == job and idle[0].value == 1, f"idle {idle}")
secs = fams["gpuq_job_gpu_idle_seconds"].samples
check(len(secs) == 1 and secs[0].value >= 3, f"idle seconds {secs}")
if errors: print("\n".join(errors)); sys.exit(1)
print("metrics OK: outside processes, busy without job, idle job")
PY

kill "$outsider"; wait "$outsider" 2>/dev/null || true  # it ends by SIGTERM
: > "$FAKE_NVIDIA_SMI_APPS"
wait_for 20 "GPU 1 free again" status_has 'g[1]["state"] == "free" and not g[1]["outside"]'
second=$(submit_as "${USERS[0]}" -J after --gres=gpu:1 "$WORK/sleep.sh")
wait_for 20 "job $second to start on GPU 1 once the process is gone" \
  status_has "g[1]['state'] == 'busy' and g[1]['job']['display_id'] == '$second'"
echo "OK: GPU 1 given out once the process outside the queue was gone"

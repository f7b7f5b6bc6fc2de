#!/usr/bin/env bash
# The status page in a real browser: Debian's headless Chromium loads the page of `gpuq web` from a
# daemon with 4 fake GPUs and 3 running jobs (each as its own Unix user when run as root), and the
# DOM it built shows each job's id and user in its GPU's tile, the pending job's reason, and the
# user-chosen names as text, not markup. It then takes a 1280x900 screenshot (the README's).
#   web_browser_test.sh GPUQ FIXTURES_DIR OUT_DIR
# Exit 77 (skipped) when chromium is missing. GPUQ_WEB_TEST_USERS="alice bob carol" names the
# users (created when missing) for a screenshot with readable names; GPUQ_WEB_TEST_JOB_SHOT=1 also
# takes a screenshot of a job page.
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "SKIP: no chromium (Debian: apt-get install chromium)"
  exit 77
fi
OUT=$(readlink -f "$3")
export FAKE_GPUS=nvidia-smi-demo  # figures that move, so the sparklines show something
source "$(dirname "$0")/web_fixture.sh" "$1" "$2"
mkdir -p "$OUT"

browser() {  # browser ARGS... URL: one headless Chromium run with a fresh profile
  local profile
  profile=$(mktemp -d "$WORK/chromium-XXXXXX")
  timeout 90 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" "$@" 2> "$WORK/chromium.log"
}

make_users 3
users=("${USERS[@]}")
printf '#!/bin/sh\nsleep 120\n' > "$WORK/sleep.sh"
printf '#!/bin/sh\nsleep 3\n' > "$WORK/done.sh"
chmod 755 "$WORK/sleep.sh" "$WORK/done.sh"
# Two finished jobs for the history, one with a name that is markup.
old1=$(submit_as "${users[0]}" -J '<b>bold</b> & "quoted"' --gres=gpu:1 "$WORK/done.sh")
old2=$(submit_as "${users[1]}" -J prep --gres=gpu:2 "$WORK/done.sh")
wait_for 30 "jobs $old1 and $old2 to finish" bash -c "! GPUQ_SOCKET=$SOCK $GPUQ_BIN queue --noheader | grep -q ."
ids=()
names=(train-resnet sweep-lr-0.1 '<script>alert(1)</script>')
for i in 0 1 2; do ids+=("$(submit_as "${users[$i]}" -J "${names[$i]}" --gres=gpu:1 "$WORK/sleep.sh")"); done
waiting=$(submit_as "${users[0]}" -J finetune --gres=gpu:2 "$WORK/sleep.sh")

sampled() { python3 - "$URL" <<'PY'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1] + "/api/status", timeout=5))
ok = len(s["running"]) == 3 and all(len(g["spark"]) >= 4 for g in s["gpus"] if g["state"] == "busy")
sys.exit(0 if ok else 1)
PY
}
wait_for 60 "3 running jobs with 4 samples each" sampled
curl_status() { python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode())" "$1"; }
curl_status "$URL/api/status" > "$WORK/status.json"

browser --dump-dom "$URL/" > "$WORK/dom.html"
python3 - "$WORK/dom.html" "$WORK/status.json" "$waiting" <<'PY'
import json, sys
from html.parser import HTMLParser
dom, status, waiting = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), sys.argv[3]

class Tree(HTMLParser):
    """Collects, per GPU tile, the text of elements by class; and every element's tag."""
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tiles, self.stack, self.tags, self.queue_text = {}, [], [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        tile = a.get("id", "").startswith("gpu-") and a["id"]
        if tag not in ("meta", "br", "img", "input", "link", "polyline", "rect", "line"):
            self.stack.append((tag, tile, a.get("class", "")))
        if tile: self.tiles[tile] = {"class": a.get("class", ""), "texts": {}}
    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag: break
    def handle_data(self, data):
        tile = next((t for _, t, _ in reversed(self.stack) if t), None)
        if tile:
            cls = self.stack[-1][2] if self.stack else ""
            self.tiles[tile]["texts"].setdefault(cls, []).append(data.strip())
        if any(c.startswith("pending") for _, _, c in self.stack): self.queue_text.append(data.strip())

t = Tree(); t.feed(dom)
errors = []
check = lambda cond, msg: cond or errors.append(msg)
check(len(t.tiles) == 4, f"{len(t.tiles)} GPU tiles in the DOM, expected 4")
busy = 0
for g in status["gpus"]:
    tile = t.tiles.get(f"gpu-{g['id']}")
    if tile is None: errors.append(f"no tile for GPU {g['id']}"); continue
    if g["state"] != "busy":
        check("free" in tile["class"], f"GPU {g['id']} is free but its tile says {tile['class']}"); continue
    busy += 1
    job = g["job"]
    check("busy" in tile["class"], f"GPU {g['id']} tile class {tile['class']}")
    check(tile["texts"].get("job-id") == [job["display_id"]], f"GPU {g['id']}: job id {tile['texts'].get('job-id')} != {job['display_id']}")
    check(tile["texts"].get("user") == [job["user"]], f"GPU {g['id']}: user {tile['texts'].get('user')} != {job['user']}")
    check(tile["texts"].get("job-name") == [job["name"]], f"GPU {g['id']}: name {tile['texts'].get('job-name')} != {job['name']!r}")
check(busy == 3, f"{busy} busy tiles, expected 3")
check("script" not in t.tags and "b" not in t.tags, f"user-chosen names became markup: tags {sorted(set(t.tags))}")
check("<b>bold</b> & \"quoted\"" in dom.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("&quot;", '"'),
      "the history's job name is missing")
check("(Resources)" in " ".join(t.queue_text), f"pending job {waiting} without its reason: {t.queue_text}")
check(f'href="/job/{waiting}"' in dom, f"pending job {waiting} not listed")
if errors: print("\n".join(errors)); sys.exit(1)
print("DOM OK: each running job's id and user on its GPU's tile")
PY

png=$OUT/gpuq-web.png
rm -f "$png"
browser --screenshot="$png" --window-size=1280,900 "$URL/" > /dev/null
python3 - "$png" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", data[16:24])
assert (w, h) == (1280, 900), f"screenshot is {w}x{h}, expected 1280x900"
assert len(data) > 20000, f"screenshot of {len(data)} bytes: an empty page?"
print(f"screenshot OK: {sys.argv[1]} ({w}x{h}, {len(data)} bytes)")
PY

# The job page: its plots are SVG drawn by the server.
browser --dump-dom "$URL/job/${ids[0]}" > "$WORK/job.html"
grep -q '<svg class="chart"' "$WORK/job.html" || { echo "FAIL: job ${ids[0]}'s page has no chart"; exit 1; }
grep -q "Job ID: ${ids[0]}" "$WORK/job.html" || { echo "FAIL: job ${ids[0]}'s page lacks its stats"; exit 1; }
echo "job page OK"
if [ -n "${GPUQ_WEB_TEST_JOB_SHOT:-}" ]; then  # the README's second picture, on request
  browser --screenshot="$OUT/gpuq-web-job.png" --window-size=1280,900 "$URL/job/${ids[0]}" > /dev/null
  echo "job page screenshot: $OUT/gpuq-web-job.png"
fi

#!/usr/bin/env bash
# /metrics of `gpuq web` read by Prometheus' own parser (Debian's python3-prometheus-client), with
# a daemon sampling 4 fake GPUs and two running jobs: every metric the issue names is there with
# the right type and labels (gpu = gpuq's id), ratios are 0-1, and the figures are the fixture's.
#   metrics_prometheus_test.sh GPUQ FIXTURES_DIR
# Exit 77 (skipped) when no python3 can import prometheus_client.
py=
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import prometheus_client' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with prometheus_client (Debian: apt-get install python3-prometheus-client)"
  exit 77
fi
source "$(dirname "$0")/web_fixture.sh" "$1" "$2"

printf '#!/bin/sh\nsleep 120\n' > "$WORK/sleep.sh"
me=$(id -un)
a=$(submit_as "$me" --gres=gpu:2 -J 'two "quoted" gpus' "$WORK/sleep.sh")
b=$(submit_as "$me" --gres=gpu:1 -J one "$WORK/sleep.sh")
have_samples() { "$py" - "$URL" <<'PY'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1] + "/api/status", timeout=5))
sys.exit(0 if len(s["running"]) == 2 and all(len(g["spark"]) >= 2 for g in s["gpus"] if g["state"] == "busy") else 1)
PY
}
wait_for 30 "jobs $a and $b to run and be sampled" have_samples

"$py" - "$URL" "$me" <<'PY'
import json, sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
url, me = sys.argv[1], sys.argv[2]
text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
status = json.load(urllib.request.urlopen(url + "/api/status", timeout=5))
fams = {f.name: f for f in text_string_to_metric_families(text)}
errors = []
def check(cond, msg):
    if not cond: errors.append(msg)
# The fixture's figures (tests/launcher/fixtures/nvidia-smi/nvidia-smi-4gpu).
util = {"0": 0.17, "1": 0.45, "2": 0.90, "3": 0.0}
mem = {"0": 1024, "1": 20480, "2": 38000, "3": 4}
want = {"gpuq_gpu_utilization_ratio": "gauge", "gpuq_gpu_memory_used_bytes": "gauge",
        "gpuq_gpu_allocated": "gauge", "gpuq_jobs": "gauge",
        "gpuq_user_gpu_seconds": "counter"}  # the parser names a counter without _total
for name, kind in want.items():
    check(name in fams, f"metric family {name} missing")
    if name in fams: check(fams[name].type == kind, f"{name} is a {fams[name].type}, not a {kind}")
if errors: print("\n".join(errors)); sys.exit(1)
for s in fams["gpuq_gpu_utilization_ratio"].samples:
    g = s.labels["gpu"]
    check(0 <= s.value <= 1, f"utilisation of GPU {g} is {s.value}, not a 0-1 ratio")
    check(abs(s.value - util[g]) < 1e-9, f"utilisation of GPU {g}: {s.value}, fixture {util[g]}")
check(sorted(s.labels["gpu"] for s in fams["gpuq_gpu_utilization_ratio"].samples) == ["0", "1", "2", "3"],
      "not one utilisation per GPU id")
for s in fams["gpuq_gpu_memory_used_bytes"].samples:
    check(s.value == mem[s.labels["gpu"]] * 1048576, f"memory of GPU {s.labels['gpu']}: {s.value}")
held = {str(g["id"]): (g["job"]["display_id"], g["job"]["user"]) for g in status["gpus"] if g["state"] == "busy"}
alloc = {s.labels["gpu"]: (s.labels["job"], s.labels["user"], s.value) for s in fams["gpuq_gpu_allocated"].samples}
check(len(held) == 3, f"{len(held)} GPUs busy, expected 3")
for g, (job, user) in held.items():
    check(alloc.get(g) == (job, user, 1.0), f"gpuq_gpu_allocated for GPU {g}: {alloc.get(g)}, expected job {job} user {user}")
check(set(alloc) == set(held), f"allocated GPUs {sorted(alloc)} differ from the busy ones {sorted(held)}")
states = {s.labels["state"]: s.value for s in fams["gpuq_jobs"].samples}
check(states.get("RUNNING") == 2, f"gpuq_jobs RUNNING = {states.get('RUNNING')}")
check(set(states) >= {"PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"},
      f"states {sorted(states)}")
secs = {s.labels["user"]: s.value for s in fams["gpuq_user_gpu_seconds"].samples if s.name.endswith("_total")}
check(secs.get(me, 0) > 0, f"no GPU-seconds for {me}: {secs}")
if errors:
    print("\n".join(errors)); print(text); sys.exit(1)
print(f"metrics OK: {len(fams)} families, {sum(len(f.samples) for f in fams.values())} samples parsed")
PY

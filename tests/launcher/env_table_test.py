#!/usr/bin/env python3
"""env_table_test.py: environment variables are read at the edge, their names in one table.

  tests/launcher/env_table_test.py REPO_ROOT

Checks, for the launcher (launcher/src) and the queue (launcher/queue/src):
  - only the edge touches the process environment: getenv/setenv/putenv/unsetenv/environ appear
    in launcher/src/sys/system.cc and launcher/queue/src/client/env.cc alone (a few places pass environ
    through to a child they spawn, the job supervisor, nvidia-smi, gnuplot: that reads no variable);
  - every variable name the launcher's sources spell is in launcher/src/alloc/env_table.h (kEnvRead or
    kEnvSet), so the table cannot fall behind the code;
  - README.md names every variable of both tables and of the queue's (launcher/queue/src/client/env.h).
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
failures = []


def table(path, name):
    text = (root / path).read_text()
    start = text.index(name)
    body = text[start : text.index("};", start)]
    return re.findall(r'\{"([A-Za-z_][A-Za-z0-9_]*)",', body)


read = table("launcher/src/alloc/env_table.h", "kEnvRead[]")
set_ = table("launcher/src/alloc/env_table.h", "kEnvSet[]")
queue = table("launcher/queue/src/client/env.h", "kQueueEnvRead[]")
if len(read) < 40 or len(set_) < 10 or len(queue) < 5:
    failures.append(f"tables look truncated: {len(read)} read, {len(set_)} set, {len(queue)} queue")

# (os.environ is the Python of the sitecustomize the wrapper writes for Python ranks.)
edge_calls = re.compile(r"(?<!os\.)\b(getenv|secure_getenv|setenv|putenv|unsetenv|clearenv|environ)\b")
edges = {"launcher/src/sys/system.cc", "launcher/queue/src/client/env.cc"}
# posix_spawn(..., environ): the environment passed through to a child, no variable read.
passthrough = {"launcher/queue/src/daemon/daemon_jobs.cc", "common/src/run_capture.cc",
               "launcher/queue/src/client/client_usage.cc", "launcher/queue/src/daemon/mailer.cc",
               "launcher/queue/src/daemon/mps.cc"}
scanned = 0
for d in ("launcher/src", "launcher/queue/src", "gpuinfo/src", "common/src"):
    for f in sorted((root / d).rglob("*.[ch]*")):
        scanned += 1
        rel = str(f.relative_to(root))
        if rel in edges:
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("//")[0]
            m = edge_calls.search(code)
            if m and not (rel in passthrough and "environ" in code and "getenv" not in code):
                failures.append(f"{rel}:{n}: {m.group(1)} below the edge: {line.strip()}")

# Literal names in the launcher's sources: NAME_WITH_UNDERSCORES, and the few one-word ones.
not_variables = {"PCI_BUS_ID"}  # a value (CUDA_DEVICE_ORDER=PCI_BUS_ID)
literal = re.compile(r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|PATH|PWD|NCPUS|RANK|TMPDIR|PYTHONPATH)"')
known = set(read) | set(set_) | not_variables
if scanned < 80:
    failures.append(f"only {scanned} sources scanned: the folders moved?")
for f in sorted([*(root / "launcher/src").rglob("*.[ch]*"), *(root / "gpuinfo/src").rglob("*.[ch]*")]):
    if f.name == "env_table.h":
        continue
    for n, line in enumerate(f.read_text().splitlines(), 1):
        for name in literal.findall(line):
            if name not in known:
                failures.append(f"{f.relative_to(root)}:{n}: {name} is not in env_table.h")

readme = (root / "README.md").read_text()
for name in read + set_ + queue:
    if not re.search(rf"(?<![A-Z0-9_]){re.escape(name)}(?![A-Z0-9_])", readme):
        failures.append(f"README.md does not name {name}")

for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print(f"ok: {len(read)} variables read and {len(set_)} set by gpurun, {len(queue)} read by gpuq; "
      "all in their tables and the README, none read below the edge")

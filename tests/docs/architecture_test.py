#!/usr/bin/env python3
"""The README's Architecture table, the folders and CMake's target graph agree (issue 28).

Configures the source tree into a scratch folder with `cmake --graphviz` and checks:
- every folder and every target the table names exists;
- every link from a target the table names to another project target is one its row allows;
- the directions the issue names hold transitively: gpuq's library reaches no launcher library,
  the kernels and the runtime reach neither the launcher, the queue nor gpuinfo, and inside the
  runtime the trainer's library is above the backends', which are above the base;
- no source below the trainer (runtime/src/{data,model,group,backend,cpu,cuda}) includes the
  trainer's headers.
Usage: architecture_test.py SOURCE_DIR CMAKE [CMAKE ARGS...]
"""
import os
import re
import subprocess
import sys
import tempfile

FORBIDDEN = [  # (from, to): `from` must not reach `to` through any chain of links
    ("gpurun_queue", "gpurun_launcher"), ("gpurun_queue", "gpurun_run"),
    ("gpurun_gpuinfo", "gpurun_launcher"), ("gpurun_gpuinfo", "gpurun_queue"),
]
RUNTIME = ("gpurun_runtime_base", "gpurun_runtime_backends", "gpurun_runtime")  # low to high
for low in ("gpurun_kernels", "gpurun_kernels_cuda") + RUNTIME:
    for high in ("gpurun_launcher", "gpurun_run", "gpurun_queue", "gpurun_gpuinfo"):
        FORBIDDEN.append((low, high))
for i, low in enumerate(RUNTIME):  # Trainer -> Backend -> base, never back
    FORBIDDEN += [(low, high) for high in RUNTIME[i + 1:]]
# Below the trainer, no source includes the trainer's headers: a backend sees BackendConfig.
BELOW_TRAINER = ["runtime/src/" + d for d in ("data", "model", "group", "backend", "cpu", "cuda")]
TRAINER_HEADERS = re.compile(r'#include\s+"(gpurun/runtime/(trainer|report|stop_signal)\.h|train/[^"]+)"')


def table(readme):
    text = open(readme, encoding="utf-8").read()
    section = text.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    rows = {}
    folders = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("part", "---"):
            continue
        names = lambda cell: re.findall(r"`([^`]+)`", cell)
        folders += names(cells[1])
        for target in names(cells[2]):
            rows[target] = set(names(cells[3]))
    return rows, folders


def graph(source, cmake):
    with tempfile.TemporaryDirectory() as tmp:
        dot = os.path.join(tmp, "targets.dot")
        subprocess.run(cmake + ["-S", source, "-B", os.path.join(tmp, "b"), "--graphviz=" + dot,
                                "-DGPURUN_BUILD_TESTS=OFF", "-DGPURUN_BUILD_BENCH=OFF"],
                       check=True, stdout=subprocess.DEVNULL)
        text = open(dot, encoding="utf-8").read()
    labels = {n: l.split("\\n")[0] for n, l in re.findall(r'"(node\d+)" \[ label = "([^"]+)"', text)}
    edges = {}
    for a, b in re.findall(r'"(node\d+)" -> "(node\d+)"', text):
        edges.setdefault(labels[a], set()).add(labels[b])
    return set(labels.values()), edges


def reaches(edges, start):
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def main():
    source, cmake = sys.argv[1], sys.argv[2:]
    rows, folders = table(os.path.join(source, "README.md"))
    targets, edges = graph(source, cmake)
    problems = []
    if len(rows) < 10:
        problems.append(f"the Architecture table names only {len(rows)} targets")
    problems += [f"folder {f} (README Architecture) does not exist"
                 for f in folders if not os.path.isdir(os.path.join(source, f))]
    problems += [f"target {t} (README Architecture) is not in CMake's graph"
                 for t in rows if t not in targets]
    project = lambda t: t in rows or t.startswith("gpurun_")
    for src, allowed in rows.items():
        for dst in sorted(edges.get(src, ())):
            if project(dst) and dst != src and dst not in allowed:
                problems.append(f"{src} links {dst}, which its README row does not allow")
    for folder in BELOW_TRAINER:
        for dirpath, _, files in os.walk(os.path.join(source, folder)):
            for name in files:
                path = os.path.join(dirpath, name)
                for m in TRAINER_HEADERS.finditer(open(path, encoding="utf-8").read()):
                    problems.append(f"{os.path.relpath(path, source)} includes {m.group(1)}, "
                                    "the trainer's: a backend sees BackendConfig (backend.h)")
    for src, dst in FORBIDDEN:
        if dst in reaches(edges, src):
            problems.append(f"{src} reaches {dst}: dependencies must point the other way")
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(f"ok: {len(rows)} targets, {sum(len(v) for v in edges.values())} links, "
          f"{len(FORBIDDEN)} forbidden directions absent")
    return 0


if __name__ == "__main__":
    sys.exit(main())

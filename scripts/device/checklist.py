#!/usr/bin/env python3
"""checklist.py: the parts of scripts/device-check.sh that read or write JSON, run the GPU test
list, or compare numbers; one subcommand each. Standard library only (the device machine's
python3 and a bare Debian python3 both run it).

  checklist.py gpu-tests BUILD_DIR ROOT            ctest -L gpu, made portable (JSON on stdout)
  checklist.py run-tests LIST BIN ROOT MPIEXEC LOGDIR RESULTS HAVE_GPU SECONDS
  checklist.py losses ONE.log TWO.log TOLERANCE    per-step running mean loss, 1 rank vs 2
  checklist.py util CSV                            `gpuq stats --csv`: the readings
  checklist.py summary RESULTS OUT [FILES...]      summary.md + results.json, the table on stdout
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time

STATUS_ORDER = ("FAILED", "not run", "no GPU", "not built", "ok")


def die(msg, code=2):
    print("checklist.py: " + msg, file=sys.stderr)
    sys.exit(code)


# ---- the GPU test list -------------------------------------------------------------------------

def portable(arg, build, root, programs):
    """One argument of a test's command, with this machine's paths turned into placeholders."""
    if arg.startswith(build + "/"):
        name = os.path.basename(arg)
        programs.add(name)
        return "{bin}/" + name
    if os.path.basename(arg) in ("mpiexec", "mpirun") and os.path.isabs(arg):
        return "{mpiexec}"
    if arg.startswith(root + "/"):
        return "{root}/" + os.path.relpath(arg, root)
    return arg


def cmd_gpu_tests(build, root):
    build, root = os.path.realpath(build), os.path.realpath(root)
    raw = subprocess.run(["ctest", "--test-dir", build, "-L", "gpu", "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
    tests, programs = [], set()
    for t in json.loads(raw)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if "gpu" not in props.get("LABELS", []):
            continue  # a fixture's setup (fetch-data) that -L pulls in
        if not t.get("command"):
            die("test %s has no command: build its program first" % t["name"])
        argv = [portable(a, build, root, programs) for a in t["command"]]
        env = [portable(e, build, root, programs) for e in props.get("ENVIRONMENT", [])]
        tests.append({"name": t["name"], "argv": argv, "env": env,
                      "timeout": int(props.get("TIMEOUT", 300))})
    if not tests:
        die("ctest -L gpu lists no test in %s: configured with GPURUN_ENABLE_CUDA=ON?" % build)
    json.dump({"tests": tests, "programs": sorted(programs)}, sys.stdout, indent=1)
    print()


def last_lines(path, n=3):
    try:
        with open(path, errors="replace") as f:
            lines = [l.rstrip() for l in f if l.strip()]
    except OSError:
        return ""
    keep = [l for l in lines if re.search(r"FAIL|rror|SKIPPED|PASSED|PASS:", l)] or lines
    return " | ".join(keep[-n:])[:400]


def ran_no_test(log):
    """A GoogleTest program that passed without running a case ("[  PASSED  ] 0 tests")."""
    with open(log, errors="replace") as f:
        return re.search(r"\[  PASSED  \] (\x1b\[m)?0 tests", f.read()) is not None


def run_one(t, subst, logdir, cwd, have_gpu, left):
    """One test of the list: (name, status, seconds, detail)."""
    argv, env = list(t["argv"]), list(t.get("env", []))
    for k, v in subst.items():
        argv = [a.replace(k, v) for a in argv]
        env = [e.replace(k, v) for e in env]
    # GoogleTest's variables (GTEST_FILTER above all) from the caller's environment would run a
    # part of a test program and still exit 0: each program runs whole.
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GTEST_")}
    environ.update(dict(e.split("=", 1) for e in env if "=" in e))
    name = "gpu_test:" + t["name"]
    if left < 5:
        return name, "not run", 0.0, "out of time (the gpu_tests step's budget)"
    log = os.path.join(logdir, "gpu_test-%s.log" % t["name"])
    t0 = time.monotonic()
    with open(log, "w") as out:
        out.write("$ %s\n" % " ".join(argv))
        out.flush()
        try:
            rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=environ,
                                timeout=min(t["timeout"], left)).returncode
        except subprocess.TimeoutExpired:
            rc = None
        except OSError as e:
            out.write("cannot start: %s\n" % e)
            rc = 127
    secs = time.monotonic() - t0
    if rc == 0 and ran_no_test(log):
        return name, "FAILED", secs, "exit 0 but ran no test: " + last_lines(log)
    if rc == 0:
        return name, "ok", secs, last_lines(log, 1)
    if rc == 77 and have_gpu != "1":
        return name, "no GPU", secs, last_lines(log, 1)
    if rc == 77:
        return name, "FAILED", secs, "skipped (exit 77) on a machine with a GPU: " + last_lines(log)
    if rc is None:
        return name, "FAILED", secs, "timed out after %.0f s: %s" % (secs, last_lines(log))
    return name, "FAILED", secs, "exit %d: %s" % (rc, last_lines(log))


def cmd_run_tests(listing, bindir, root, mpiexec, logdir, results, have_gpu, seconds):
    """Runs every test of the list, one after the other on the GPU. A skip (77) on a machine with
    a GPU is a failure. Without a GPU each program only probes and exits 77, so they run side by
    side: the dry run takes seconds."""
    deadline = time.monotonic() + float(seconds)
    subst = {"{bin}": bindir, "{root}": root, "{mpiexec}": mpiexec}
    with open(listing) as f:
        tests = json.load(f)["tests"]
    one = lambda t: run_one(t, subst, logdir, root, have_gpu, deadline - time.monotonic())
    if have_gpu == "1":
        rows = [one(t) for t in tests]
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(tests)) as pool:
            rows = list(pool.map(one, tests))
    with open(results, "a") as res:
        for name, status, secs, why in rows:
            res.write("%s\t%s\t%.1f\t%s\n" % (name, status, secs, why.replace("\t", " ")))
    return 1 if any(r[1] in ("FAILED", "not run") for r in rows) else 0


# ---- the two-rank loss comparison --------------------------------------------------------------

BAR = re.compile(r"epoch (\d+) \[[# ]*\] (\d+)/(\d+) loss ([0-9.]+|nan|inf)")


def running_means(path):
    """{step: running mean loss} from the progress bar that GPURUN_STDOUT_TTY=1 turns on."""
    with open(path, errors="replace") as f:
        text = f.read()
    means = {}
    for part in re.split(r"[\r\n]", text):
        m = BAR.search(part)
        if m and m.group(1) == "1":
            means[int(m.group(2))] = float(m.group(4))
    return means


def cmd_losses(one_log, two_log, tol):
    one, two = running_means(one_log), running_means(two_log)
    steps = sorted(set(one) & set(two))
    if not steps:
        print("no per-step losses in %s and %s (was GPURUN_STDOUT_TTY=1 set, --loss-every 1?)"
              % (one_log, two_log))
        return 1
    worst = max(steps, key=lambda s: abs(one[s] - two[s]))
    d = abs(one[worst] - two[worst])
    gaps = [s for s in range(1, steps[-1] + 1) if s not in one or s not in two]
    print("running mean loss over steps 1..%d: max |1 rank - 2 ranks| = %.2g at step %d "
          "(%.4f vs %.4f); step 1 %.4f vs %.4f; last %.4f vs %.4f; tolerance %g"
          % (steps[-1], d, worst, one[worst], two[worst], one[steps[0]], two[steps[0]],
             one[steps[-1]], two[steps[-1]], float(tol)))
    if gaps:
        print("steps without a reading in one of the runs: %s" % gaps[:10])
        return 1
    return 0 if d <= float(tol) else 1


# ---- the GPU sampler's readings ----------------------------------------------------------------

def cmd_util(csv_path):
    rows = []
    with open(csv_path) as f:
        header = f.readline().strip().split(",")
        if header[:3] != ["time", "gpu", "util"]:
            print("unexpected header %s" % header)
            return 1
        for line in f:
            cells = line.strip().split(",")
            if len(cells) >= 3 and cells[2]:
                rows.append(float(cells[2]))
    if not rows:
        print("no utilisation reading among the samples")
        return 1
    print("%d samples, utilisation max %.0f%%, mean %.0f%%"
          % (len(rows), max(rows), sum(rows) / len(rows)))
    return 0


# ---- summary.md, results.json and the closing table ---------------------------------------------

def read_results(path):
    steps = []
    with open(path) as f:
        for line in f:
            cells = line.rstrip("\n").split("\t")
            if len(cells) == 4:
                steps.append({"step": cells[0], "status": cells[1], "seconds": float(cells[2]),
                              "detail": cells[3]})
    return steps


def cmd_summary(results, out, files):
    steps = read_results(results)
    info = {}
    for path in files:  # KEY=VALUE files (machine.txt) become a "machine" object
        try:
            with open(path) as f:
                info.update(l.rstrip("\n").split("=", 1) for l in f if "=" in l)
        except OSError:
            pass
    counts = {s: sum(1 for x in steps if x["status"] == s) for s in STATUS_ORDER}
    doc = {"machine": info, "steps": steps, "counts": counts}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    md = ["# gpurun device checklist", ""]
    md += ["- %s: %s" % (k, v) for k, v in info.items()]
    md += ["", "| step | status | s | detail |", "|---|---|---:|---|"]
    md += ["| %s | %s | %.1f | %s |" % (s["step"], s["status"], s["seconds"],
                                          s["detail"].replace("|", "/")) for s in steps]
    md += ["", "Counts: " + ", ".join("%s %d" % (k, v) for k, v in counts.items() if v), ""]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(md))
    width = max([len(s["step"]) for s in steps] + [4])
    print("\n== device checklist (%s) ==" % info.get("gpu", "?"))
    for s in steps:
        print("%-*s  %-9s %6.1fs  %s" % (width, s["step"], s["status"], s["seconds"],
                                          s["detail"][:110]))
    print("counts: " + ", ".join("%s %d" % (k, v) for k, v in counts.items() if v))
    return 0


def main(argv):
    if len(argv) < 2:
        die(__doc__.strip())
    cmd, args = argv[1], argv[2:]
    table = {"gpu-tests": (cmd_gpu_tests, 2), "run-tests": (cmd_run_tests, 8),
             "losses": (cmd_losses, 3), "util": (cmd_util, 1)}
    if cmd == "summary" and len(args) >= 2:
        return cmd_summary(args[0], args[1], args[2:])
    if cmd not in table or len(args) != table[cmd][1]:
        die("usage:\n" + __doc__.strip())
    return table[cmd][0](*args) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

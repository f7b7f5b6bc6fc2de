#!/usr/bin/env python3
"""summarize.py: tabulates bench/gpu_mnist/run.sh's raw reports into OUT/gpu_mnist.md and
OUT/gpu_mnist.json: per batch, steady-state seconds per 60k epoch (median of the epochs after
the first) of mnist_cnn FP32 (graph and --no-graph), TF32 when it ran, PyTorch eager and
torch.compile, the ratios, images/s, test accuracy, the --breakdown split, and how far each run is
from the GPU's arithmetic limit: the step's FLOP (the report's train_flops_per_example: 17.4
MFLOP per image, 1.04 TFLOP per 60k epoch) over its seconds, against the round peaks issue 10
names for an H100 or H200 (about 60 TFLOP/s FP32, 400 TF32; a spec, not a measurement). Works on
a partial raw/ folder (a run cut short): what is missing says so. A report of a run on the CUDA
stand-in (tests/standin: its device is named "... (gpurun CUDA stand-in)") is never a GPU
measurement: with one in RAW_DIR nothing is written and the exit status is 2.

  python3 bench/gpu_mnist/summarize.py RAW_DIR OUT_DIR
"""
import json
import os
import re
import statistics
import sys


NOT_ASKED = "not asked"  # how run.sh marks a run its options left out
# TFLOP/s FP32 and TF32 (dense) by GPU name: issue 10's round figures for these GPUs.
PEAKS = {"H100": (60.0, 400.0), "H200": (60.0, 400.0)}


def peaks_of(gpu):
    return next((p for name, p in PEAKS.items() if name in (gpu or "")), None)


def tflops(r, seconds):
    """TFLOP/s of a run of mnist_cnn: its epoch's images (steps x global batch) x the step's FLOP
    per image, over the epoch's steady seconds."""
    try:
        images = r["steps_per_epoch"] * r["global_batch"]
        return r["train_flops_per_example"] * images / seconds / 1e12
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def of_peak(t, peak):
    if t is None:
        return "n/a"
    return "%.1f (%.0f%%)" % (t, 100 * t / peak) if peak else "%.1f" % t


def steady(xs):
    xs = list(xs or [])
    return statistics.median(xs[1:]) if len(xs) > 1 else (xs[0] if xs else None)


def load(raw, name):
    """A run's report: mnist_cnn's indented JSON, or the one JSON line torch_gpu_mnist.py prints
    (with the last line of its stderr when it printed nothing)."""
    path = os.path.join(raw, name)
    if not os.path.exists(path):
        return {"error": "not run"}
    try:
        with open(path) as f:
            text = f.read().strip()
        if text:
            try:
                return json.loads(text)
            except ValueError:
                return json.loads(text.splitlines()[-1])
        why = "no output"
        try:
            with open(path[:-len(".json")] + ".log") as f:
                why = ([l.strip() for l in f if l.strip()] or [why])[-1]
        except OSError:
            pass
        return {"error": why}
    except (OSError, ValueError) as e:
        return {"error": "%s: %s" % (name, e)}


def breakdown(raw, b):
    try:
        with open(os.path.join(raw, "gpurun-breakdown-b%s.log" % b)) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"breakdown: kernels ([0-9.e+-]+) s, allreduce ([0-9.e+-]+) s, "
                  r"host ([0-9.e+-]+) s", text)
    return dict(zip(("kernels", "allreduce", "host"), map(float, m.groups()))) if m else None


def batches_in(raw):
    found = set()
    for name in os.listdir(raw):
        m = re.match(r"gpurun-b(\d+)\.json$", name)
        if m:
            found.add(int(m.group(1)))
    return sorted(found)


def fmt(v, f="%.4f"):
    return f % v if v else "n/a"


def ratio(v, base):
    return "%.1fx" % (v / base) if v and base else "n/a"


def acc(r):
    return "%.2f%%" % (100 * r["test_accuracy"]) if "test_accuracy" in r else "n/a"


def row_for(raw, b, peaks):
    runs = {k: load(raw, "%s-b%d.json" % (k, b)) for k in
            ("gpurun", "gpurun-tf32", "gpurun-nograph", "torch-eager", "torch-compile")}
    s = {k: (steady(r.get("seconds_per_epoch")) if "error" not in r else None)
         for k, r in runs.items()}
    bd = breakdown(raw, b)
    g = runs["gpurun"]
    t = {k: tflops(runs[k], s[k]) for k in ("gpurun", "gpurun-tf32")}
    p32, ptf = peaks or (None, None)
    row = "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        b, fmt(s["gpurun"]),
        "%.0f" % (g.get("train_examples", 60000) / s["gpurun"]) if s["gpurun"] else "n/a",
        of_peak(t["gpurun"], p32), acc(g), fmt(s["gpurun-tf32"]),
        of_peak(t["gpurun-tf32"], ptf), acc(runs["gpurun-tf32"]), fmt(s["gpurun-nograph"]),
        fmt(s["torch-eager"]), ratio(s["torch-eager"], s["gpurun"]), fmt(s["torch-compile"]),
        ratio(s["torch-compile"], s["gpurun"]),
        ("k %.3f / ar %.3f / host %.3f s" % (bd["kernels"], bd["allreduce"], bd["host"]))
        if bd else "n/a")
    notes = ["|  | %s: %s |" % (k, r["error"]) for k, r in runs.items() if "error" in r]
    missing = [k for k, r in runs.items()
               if s[k] is None and not r.get("error", "").startswith(NOT_ASKED)]
    return row, notes, missing, {"runs": runs, "steady_seconds": s, "tflops": t,
                                 "breakdown_2_epochs": bd}


def standin_runs(raw):
    """The reports in raw whose device is the CUDA stand-in's."""
    found = []
    for name in sorted(os.listdir(raw)):
        if name.endswith(".json"):
            dev = load(raw, name).get("device", "")
            if isinstance(dev, str) and "stand-in" in dev:
                found.append("%s (%s)" % (name, dev))
    return found


def main(raw, out):
    standin = standin_runs(raw)
    if standin:
        print("summarize.py: %s ran on the CUDA stand-in, which is not a GPU: no figure of it is a "
              "measurement; nothing written" % ", ".join(standin))
        return 2
    vers = {}
    try:
        with open(os.path.join(raw, "versions.txt")) as f:
            vers = dict(l.strip().split("=", 1) for l in f if "=" in l)
    except OSError:
        pass
    res, rows, missing = {"versions": vers, "batches": {}}, [], []
    peaks = peaks_of(vers.get("gpu"))
    res["peaks_tflops_fp32_tf32"] = peaks
    for b in batches_in(raw):
        row, notes, miss, res["batches"][str(b)] = row_for(raw, b, peaks)
        rows += [row] + notes
        missing += ["%s at %d" % (k, b) for k in miss]
    flop = next((r["runs"]["gpurun"].get("train_flops_per_example")
                 for r in res["batches"].values()
                 if "train_flops_per_example" in r["runs"]["gpurun"]), None)
    md = ["# GPU MNIST CNN: seconds per 60k epoch, one GPU", "",
          "Device: %s, driver %s. Loaded by mnist_cnn: %s. PyTorch: %s." % (
              vers.get("gpu", "?"), vers.get("driver", "?"), vers.get("loaded", "n/a"),
              vers.get("torch", "n/a")),
          "Fashion-MNIST; steady state = median of the epochs after the first; ratios are "
          "PyTorch FP32 seconds over mnist_cnn FP32 seconds (TF32 off on both sides).",
          "TFLOP/s: the convolutions' and matrix products' FLOP of an epoch's training steps "
          "(%s per image) over its steady seconds; %s." % (
              "%.1f MFLOP" % (flop / 1e6) if flop else "n/a",
              "in brackets the share of %.0f TFLOP/s FP32 and %.0f TF32, the round peaks issue 10 "
              "names for this GPU (a spec, not a measurement)" % peaks if peaks else
              "no peak is named for this GPU"), "",
          "| batch | FP32 s | FP32 img/s | FP32 TFLOP/s | FP32 test acc | TF32 s | TF32 TFLOP/s "
          "| TF32 test acc | --no-graph s | torch eager s | eager/gpurun | torch.compile s "
          "| compile/gpurun | breakdown (2 epochs) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"] + rows + [""]
    if not rows:
        md.append("No mnist_cnn report in %s: nothing ran to the end." % raw)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "gpu_mnist.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, "gpu_mnist.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("\n".join(md))
    if missing:
        print("summarize.py: no figure for %s" % ", ".join(missing))
    return 0 if rows and not missing else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

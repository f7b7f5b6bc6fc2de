#!/usr/bin/env python3
"""Launch overhead: `gpurun -n 4 -- /bin/true` against `mpirun -n 4 /bin/true`, in the same run.

usage: bench_launch.py GPURUN [--runs N]
Runs the two commands interleaved (so drift hits both alike), prints median and p90 wall time of
each, what gpurun adds in milliseconds, and the ratio. Target: gpurun adds at most 50 ms.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def timed(cmd, env):
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"bench_launch: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpurun")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("-n", type=int, default=4)
    a = ap.parse_args()
    env = dict(os.environ)
    for k in [k for k in env if k.startswith(("SLURM_", "PBS_", "LSB_", "GPUQ_"))]:
        del env[k]
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    ours = [a.gpurun, "-q", "--scheduler", "local", "-n", str(a.n), "--", "/bin/true"]
    peer = ["mpirun", *root, "--oversubscribe", "-n", str(a.n), "/bin/true"]
    for _ in range(3):  # warm the page cache for both
        timed(ours, env)
        timed(peer, env)
    g, m = [], []
    for _ in range(a.runs):
        g.append(timed(ours, env))
        m.append(timed(peer, env))
    def p90(v):
        return sorted(v)[int(0.9 * (len(v) - 1))]
    gm, mm = statistics.median(g), statistics.median(m)
    print(f"runs: {a.runs} each, interleaved, {a.n} ranks of /bin/true")
    print(f"mpirun -n {a.n}          median {mm*1e3:7.1f} ms   p90 {p90(m)*1e3:7.1f} ms")
    print(f"gpurun -n {a.n} (mpirun) median {gm*1e3:7.1f} ms   p90 {p90(g)*1e3:7.1f} ms")
    added = (gm - mm) * 1e3
    print(f"gpurun adds {added:.1f} ms per launch (target <= 50 ms): "
          f"{'PASS' if added <= 50 else 'FAIL'}; ratio gpurun/mpirun = {gm/mm:.2f}x")
    return 0 if added <= 50 else 1


if __name__ == "__main__":
    sys.exit(main())

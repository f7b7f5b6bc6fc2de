#!/usr/bin/env python3
"""Launch overhead of two gpurun builds, interleaved in the same run: `gpurun -n 4 -- /bin/true`.

usage: ab_launch.py OLD_GPURUN NEW_GPURUN [RUNS]
For a change that must not make launches slower: build the old commit's gpurun aside (or copy
it before rebuilding), then compare. Prints median and p90 of each and the difference.
"""
import os
import statistics
import subprocess
import sys
import time


def main():
    old, new = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "PBS_", "LSB_", "GPUQ_"))}

    def timed(gpurun):
        cmd = [gpurun, "-q", "--scheduler", "local", "-n", "4", "--", "/bin/true"]
        t = time.perf_counter()
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            sys.exit(f"ab_launch: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode()[-300:]}")
        return (time.perf_counter() - t) * 1e3

    for _ in range(3):  # warm the page cache for both
        timed(old)
        timed(new)
    a, b = [], []
    for _ in range(runs):
        a.append(timed(old))
        b.append(timed(new))
    q = lambda x: (statistics.median(x), sorted(x)[int(0.9 * len(x))])
    print(f"runs: {runs} each, interleaved, gpurun -n 4 -- /bin/true (mpirun engine)")
    print("old  median %6.1f ms   p90 %6.1f ms" % q(a))
    print("new  median %6.1f ms   p90 %6.1f ms" % q(b))
    print("new - old: %+.1f ms median" % (statistics.median(b) - statistics.median(a)))


if __name__ == "__main__":
    main()

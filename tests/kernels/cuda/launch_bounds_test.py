#!/usr/bin/env python3
"""launch_bounds_test.py: every CUDA kernel of the project declares the block it is launched with.

A kernel without __launch_bounds__ may be given more registers than a 1,024-thread block can hold
(the launch then fails with "too many resources requested"); cuda_support/.../launch.cuh says why
each kernel declares GPURUN_KERNEL_BOUNDS(threads). With that bound, ptxas fits the registers to
the block or spills, and the nvcc build fails on spills: together they are the build's check.
  launch_bounds_test.py FILE.cu...   (exit 1 naming each kernel without a bound)
"""
import re
import sys


def kernels(text):
    """(name, declaration) of each __global__ function: the text from __global__ to its '('."""
    for m in re.finditer(r"__global__\s+void\s+(.*?)\(", text, re.S):
        decl = m.group(1)
        name = decl.split()[-1] if decl.split() else "?"
        yield name, decl


def main(paths):
    missing, seen = [], 0
    for path in paths:
        text = open(path, encoding="utf-8").read()
        # A bound's own parentheses end the match early: rejoin what follows it.
        text = re.sub(r"GPURUN_KERNEL_BOUNDS\(([^()]*)\)", r"GPURUN_KERNEL_BOUNDS[\1]", text)
        for name, decl in kernels(text):
            seen += 1
            if "GPURUN_KERNEL_BOUNDS[" not in decl:
                missing.append(f"{path}: kernel {name} has no GPURUN_KERNEL_BOUNDS(threads)")
    for line in missing:
        print(line)
    print(f"{seen} kernels, {len(missing)} without a launch bound")
    return 1 if missing or seen == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

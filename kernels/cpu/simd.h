// simd.h (private): GPURUN_SIMD_CLONES compiles a hot loop for AVX-512, AVX2 and baseline x86-64
// and lets the loader pick one at run time (GCC function multiversioning), so the binary stays
// portable without -march. The library is built with -ffp-contract=off, so each clone does the
// same arithmetic per element (no FMA contraction) and results do not depend on which clone runs
// or on where a loop is split between threads.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPURUN_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPURUN_SIMD_CLONES
#endif

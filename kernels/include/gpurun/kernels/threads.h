// threads.h: how many threads the CPU ops use in this process (OpenBLAS's, oneDNN's OpenMP
// teams, BLIS's: whichever library cpu_kernels.h chose), and what OpenBLAS runs on this CPU.
#pragma once

namespace gpurun::kernels::cpu {

// Threads per call of the chosen CPU library, for every thread of the process; n < 1 throws
// std::invalid_argument.
void set_num_threads(int n);
int num_threads();
// Name of the BLAS library and its build config, for reports ("OpenBLAS 0.3.21 ... Zen").
const char* blas_info();
// The kernel set OpenBLAS picked at load time ("Haswell", "SkylakeX", ...).
const char* blas_core();
// True when this CPU has the AVX-512 subsets OpenBLAS's SkylakeX/Cooperlake kernels use.
bool cpu_has_avx512();
// True when the BLAS runs AVX2-only kernels (Haswell, Zen) on a CPU that has AVX-512, as
// OPENBLAS_CORETYPE=Haswell forces; the caller may tell the user (those kernels are ~40% slower).
bool blas_below_cpu();

}  // namespace gpurun::kernels::cpu

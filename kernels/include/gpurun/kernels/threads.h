// threads.h: how many threads the CPU ops (OpenBLAS) use in this process.
#pragma once

namespace gpurun::kernels::cpu {

// Sets OpenBLAS's thread count; n < 1 throws std::invalid_argument.
void set_num_threads(int n);
int num_threads();
// Name of the BLAS library and its build config, for reports ("OpenBLAS 0.3.21 ... Zen").
const char* blas_info();

}  // namespace gpurun::kernels::cpu

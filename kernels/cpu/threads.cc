// threads.cc: OpenBLAS thread control. --threads reaches OpenBLAS through here, so one rank per
// core (the data-parallel layout) does not oversubscribe the machine with BLAS threads.
#include "gpurun/kernels/threads.h"

#include <cblas.h>

#include <stdexcept>
#include <string>

namespace gpurun::kernels::cpu {

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("threads must be >= 1, got " + std::to_string(n));
  openblas_set_num_threads(n);
}

int num_threads() {
  return openblas_get_num_threads();
}

const char* blas_info() {
  return openblas_get_config();
}

const char* blas_core() {
  return openblas_get_corename();
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool blas_below_cpu() {
  const std::string core = openblas_get_corename();
  return cpu_has_avx512() && (core == "Haswell" || core == "Zen");
}

}  // namespace gpurun::kernels::cpu

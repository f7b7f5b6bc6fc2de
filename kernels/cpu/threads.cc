// threads.cc: what OpenBLAS runs on this CPU (set_num_threads lives with the choice of library,
// cpu_kernels.cc).
#include "gpurun/kernels/threads.h"

#include <cblas.h>

#include <stdexcept>
#include <string>

namespace gpurun::kernels::cpu {

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

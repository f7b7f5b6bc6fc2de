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

}  // namespace gpurun::kernels::cpu

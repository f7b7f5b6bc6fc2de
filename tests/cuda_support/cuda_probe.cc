// cuda_probe: exits 0 when this process can use a CUDA device, 77 (CTest's skip) with the reason
// when there is none, 1 with the reason when one is there but unusable. The shell-driven GPU tests
// (tests/runtime/cuda/*.sh) call it first, so that whether they skip never depends on what the
// program under test printed.
#include "gpu_test_util.h"

int main() {
  gpurun::testing::exit_77_without_a_device();
  std::printf("CUDA device usable\n");
  return 0;
}

// gpu_test_main.cc: main() of the GPU GoogleTest programs. Without a usable CUDA device the whole
// program exits 77, which CTest reports as skipped (SKIP_RETURN_CODE 77); with one, every test
// runs and a failure fails. No test skips itself, so a skip can never hide a failed case.
#include <cstdio>
#include <cstdlib>

#include "gpu_test_util.h"

namespace gpurun::testing {

void exit_77_without_a_device() {
  const std::string why = no_device_reason();
  if (why.empty()) return;
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(77);
}

}  // namespace gpurun::testing

#ifndef GPURUN_GPU_TEST_OWN_MAIN
int main(int argc, char** argv) {
  gpurun::testing::exit_77_without_a_device();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
#endif

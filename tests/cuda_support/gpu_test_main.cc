// gpu_test_main.cc: main() of the GPU GoogleTest programs. Without a CUDA device the whole
// program exits 77, which CTest reports as skipped (SKIP_RETURN_CODE 77); with a device that
// cannot be used it fails; with a usable one, every test runs and a failure fails. No test skips
// itself, so a skip can never hide a failed case.
#include <cstdio>
#include <cstdlib>

#include "gpu_test_util.h"

namespace gpurun::testing {

void exit_77_without_a_device() {
  std::string why;
  const DeviceState state = device_state(why);
  if (state == DeviceState::kUsable) return;
  const bool absent = state == DeviceState::kAbsent;
  std::fprintf(absent ? stdout : stderr, "%s: %s\n", absent ? "SKIPPED" : "FAILED", why.c_str());
  std::fflush(nullptr);
  std::exit(absent ? 77 : 1);
}

}  // namespace gpurun::testing

#ifndef GPURUN_GPU_TEST_OWN_MAIN
int main(int argc, char** argv) {
  gpurun::testing::exit_77_without_a_device();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
#endif

// kernels_test_main.cc: main() of the CPU kernel tests. `--cpu-kernels=onednn|openblas|blis`
// picks the library under the cpu:: ops (cpu_kernels.h) for the whole run, so CTest runs every
// test once per library against the same ref:: oracle. A library this machine lacks exits 77
// (skipped) before any test runs; every test of an available one runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "gpurun/kernels/cpu_kernels.h"
#include "gpurun/kernels/threads.h"

int main(int argc, char** argv) {
  namespace kc = gpurun::kernels::cpu;
  kc::CpuKernels lib = kc::default_cpu_kernels();
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const char* flag = "--cpu-kernels=";
    if (std::strncmp(argv[i], flag, std::strlen(flag)) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    const auto k = kc::parse_cpu_kernels(argv[i] + std::strlen(flag));
    if (!k) return std::fprintf(stderr, "unknown %s (onednn, openblas, blis)\n", argv[i]), 2;
    lib = *k;
  }
  argc = kept;
  std::string why;
  if (!kc::cpu_kernels_available(lib, &why)) {
    std::printf("SKIPPED: %s: %s\n", kc::name(lib), why.c_str());
    return 77;
  }
  kc::set_cpu_kernels(lib);
  kc::set_num_threads(1);
  std::printf("CPU kernels: %s\n", kc::cpu_kernels_info().c_str());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

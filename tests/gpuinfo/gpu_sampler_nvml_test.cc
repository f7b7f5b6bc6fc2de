// gpu_sampler_nvml_test: the device checklist's proof that the GPU sampler reads real figures
// through NVML (no fixture): it starts a GPU program, samples every 250 ms while it runs, prints
// each sample as its one-line encoding, and passes when NVML (not nvidia-smi) answered and some
// GPU showed utilisation above 0 and memory in use during the run.
//   gpu_sampler_nvml_test PROGRAM [ARGS...]     e.g. mnist_cnn --device cuda --data DIR
// Exit 77 (skipped) where NVML cannot be loaded or lists no GPU: every machine without one.
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gpurun/gpuinfo/gpu_sampler.h"

extern char** environ;
namespace gpuinfo = gpurun::gpuinfo;

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: gpu_sampler_nvml_test PROGRAM [ARGS...]\n");
    return 2;
  }
  gpuinfo::GpuSampler sampler;  // no nvidia-smi named: NVML when it loads
  if (sampler.backend().rfind("nvml", 0) != 0) {
    fmt::print("SKIP: NVML (libnvidia-ml.so.1) cannot be loaded here; backend: {}\n",
               sampler.backend());
    return 77;
  }
  gpuinfo::GpuSnapshot first = sampler.sample();
  if (first.gpus.empty()) {
    fmt::print("SKIP: NVML lists no GPU\n");
    return 77;
  }
  fmt::print("before: {}\n", gpuinfo::encode_snapshot(first));
  pid_t pid = 0;
  if (posix_spawnp(&pid, argv[1], nullptr, nullptr, argv + 1, environ) != 0) {
    fmt::print(stderr, "cannot start {}\n", argv[1]);
    return 1;
  }
  double best_util = 0, best_mem = 0;
  int samples = 0, status = 0;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > give_up) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fmt::print(stderr, "FAIL: {} ran for more than 300 s\n", argv[1]);
      return 1;
    }
    gpuinfo::GpuSnapshot s = sampler.sample();
    ++samples;
    fmt::print("{}\n", gpuinfo::encode_snapshot(s));
    for (const auto& g : s.gpus) {
      best_util = std::max(best_util, g.util_percent.value_or(0));
      best_mem = std::max(best_mem, g.mem_used_mib.value_or(0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  fmt::print("{} samples during the run: highest utilisation {}%, highest memory used {} MiB\n",
             samples, best_util, best_mem);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fmt::print(stderr, "FAIL: {} did not exit 0 (status {})\n", argv[1], status);
    return 1;
  }
  if (best_util <= 0 || best_mem <= 0) {
    fmt::print(stderr, "FAIL: NVML showed no utilisation or no memory in use during the run\n");
    return 1;
  }
  fmt::print("PASSED: NVML read real utilisation during the run\n");
  return 0;
}

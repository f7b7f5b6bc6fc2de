// gpu_nvml.h: the GPU sampler's NVML backend: libnvidia-ml.so.1 loaded with dlopen, so neither
// gpurun nor gpuq needs the driver to build or to start. Private to gpuinfo.
#pragma once

#include <memory>
#include <string>

#include "gpurun/gpuinfo/gpu_sampler.h"

namespace gpurun::gpuinfo {

class NvmlBackend {
 public:
  // nullptr when the library cannot be loaded or nvmlInit fails; *why says which.
  static std::unique_ptr<NvmlBackend> open(std::string* why);
  ~NvmlBackend();
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  // Fills gpus and problems, and with `processes` each GPU's compute processes; throws Error
  // when NVML cannot even count the devices.
  void sample(GpuSnapshot& out, bool processes);

  struct Api;  // the resolved entry points (gpu_nvml.cc)

 private:
  explicit NvmlBackend(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace gpurun::gpuinfo

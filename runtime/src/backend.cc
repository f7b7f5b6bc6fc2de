// backend.cc: make_backend(), the one place a device is chosen (backend.h).
#include "gpurun/runtime/backend.h"

#include <stdexcept>

#include "backends.h"

namespace gpurun::runtime {

const char* exchange_name(Exchange e) {
  switch (e) {
    case Exchange::kAuto:
      return "auto";
    case Exchange::kAllreduce:
      return "allreduce";
    case Exchange::kShared:
      return "shared";
  }
  return "?";
}

bool cuda_available() noexcept {
#if GPURUN_HAVE_CUDA
  return cuda_device_usable();
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(ProcessGroup& pg, const ModelSpec& model, const Dataset& data,
                                      const TrainConfig& cfg, const BackendOptions& options,
                                      std::ostream& log) {
  validate(cfg);
  if (options.device == Device::kCpu) {
    return make_cpu_backend(pg, model, data, cfg, options.cpu, log);
  }
#if GPURUN_HAVE_CUDA
  return make_cuda_backend(pg, model, data, cfg, options.cuda, log);
#else
  throw std::runtime_error(
      "--device cuda: this program was built without CUDA (GPURUN_ENABLE_CUDA=OFF); use "
      "--device cpu");
#endif
}

}  // namespace gpurun::runtime

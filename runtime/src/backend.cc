// backend.cc: make_backend(), the one place a device is chosen (backend.h).
#include "gpurun/runtime/backend.h"

#include <stdexcept>

#include "backends.h"
#include "gpurun/runtime/process_group.h"
#include "gpurun/runtime/trainer.h"

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
  // What every rank can check before the first collective, agreed on, so that a bad
  // configuration is one error on every rank rather than an abort.
  run_agreed(pg, [&] {
    validate(cfg);
    // The data is one channel of rows x cols (dataset.h) in `classes` classes.
    const Shape in{1, data.train.rows, data.train.cols};
    if (!(model.input() == in) || model.output().size() != std::size_t(data.classes)) {
      const Shape m = model.input();
      throw std::invalid_argument("the model takes " + std::to_string(m.c) + "x" +
                                  std::to_string(m.h) + "x" + std::to_string(m.w) + " inputs to " +
                                  std::to_string(model.output().size()) + " outputs; the data " +
                                  data.name + " has 1x" + std::to_string(in.h) + "x" +
                                  std::to_string(in.w) + " images (one channel) in " +
                                  std::to_string(data.classes) + " classes");
    }
#if !GPURUN_HAVE_CUDA
    if (options.device == Device::kCuda) {
      throw std::runtime_error(
          "a CUDA backend was asked for, but this program was built without CUDA "
          "(GPURUN_ENABLE_CUDA=OFF); the CPU backend (Device::kCpu) is what it has");
    }
#endif
  });
  if (options.device == Device::kCpu) {
    return make_cpu_backend(pg, model, data, cfg, options.cpu, log);
  }
#if GPURUN_HAVE_CUDA
  return make_cuda_backend(pg, model, data, cfg, options.cuda, log);
#else
  throw std::logic_error("unreachable: Device::kCuda without CUDA");
#endif
}

}  // namespace gpurun::runtime

// backends.h (private): the constructors behind make_backend() (backend.cc). The CUDA one exists
// only in builds with CUDA (GPURUN_HAVE_CUDA), in runtime/src/cuda. A backend
// sees BackendConfig, never the trainer's TrainConfig (backend.h).
#pragma once

#include <iosfwd>
#include <memory>

#include "gpurun/runtime/backend.h"

namespace gpurun::runtime {

std::unique_ptr<Backend> make_cpu_backend(ProcessGroup& pg, const ModelSpec& model,
                                          const Dataset& data, const BackendConfig& cfg,
                                          const CpuOptions& options, std::ostream& log);

#if GPURUN_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(ProcessGroup& pg, const ModelSpec& model,
                                           const Dataset& data, const BackendConfig& cfg,
                                           const CudaOptions& options, std::ostream& log);
bool cuda_device_usable() noexcept;
#endif

}  // namespace gpurun::runtime

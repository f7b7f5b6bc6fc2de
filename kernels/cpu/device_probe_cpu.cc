// device_probe_cpu.cc: the CPU-only build's answer to cuda_device_count(): no device.
#include "gpurun/kernels/device_probe.h"

#ifndef GPURUN_HAVE_CUDA
namespace gpurun::kernels {
int cuda_device_count() noexcept {
  return 0;
}
}  // namespace gpurun::kernels
#endif

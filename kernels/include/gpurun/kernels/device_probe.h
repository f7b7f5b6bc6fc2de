// device_probe.h: how many CUDA devices this process can use. Returns 0 when the build has no
// CUDA, when there is no driver, or when no device is visible; never throws.
#pragma once

namespace gpurun::kernels {

int cuda_device_count() noexcept;

}  // namespace gpurun::kernels

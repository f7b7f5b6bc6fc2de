// device_probe.cu: counts usable CUDA devices and proves one kernel can launch on the first.
// Built whenever GPURUN_ENABLE_CUDA is on, so CI compiles and links CUDA code from day one.
#include <cuda_runtime.h>

#include "gpurun/kernels/device_probe.h"
#include "gpurun/cuda_support/launch.cuh"

namespace gpurun::kernels {
namespace {
__global__ void GPURUN_KERNEL_BOUNDS(1) touch(int* out) {
  *out = 42;
}
}  // namespace

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  if (n == 0) return 0;
  int* d = nullptr;
  if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return 0;
  GPURUN_KERNEL_LAUNCH(touch, 1, 1, 0, cudaStreamLegacy, d);
  int h = 0;
  bool ok = cudaGetLastError() == cudaSuccess &&
            cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess && h == 42;
  cudaFree(d);
  return ok ? n : 0;
}

}  // namespace gpurun::kernels

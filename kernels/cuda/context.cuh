// context.cuh: per-thread, per-device library handles for the cuda:: ops, whose signatures carry
// only a Stream. cuDNN and cuBLAS handles are not thread-safe, so each host thread gets its own
// (created on first use, destroyed at thread exit). cuBLAS gets an explicit workspace because
// graph capture must not allocate, and cublasSetStream resets the workspace to the default pool.
// Call warm_up() before capturing a CUDA Graph: creating a handle inside a capture would break it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>

#include "gpurun/kernels/types.h"

namespace gpurun::kernels::cuda::detail {

inline cudaStream_t raw(Stream s) {
  return static_cast<cudaStream_t>(s.handle);
}

// This thread's cuDNN handle for the current device, bound to s.
cudnnHandle_t cudnn_on(Stream s);
// This thread's cuBLAS handle for the current device, bound to s, with its workspace and the
// math mode of math_precision().
cublasHandle_t cublas_on(Stream s);
// Creates this thread's handles for the current device now (outside any stream capture).
void warm_up();

// Blocks for a grid-stride loop over n elements: enough to fill the device, never zero.
int grid_blocks(std::size_t n, int block);

}  // namespace gpurun::kernels::cuda::detail

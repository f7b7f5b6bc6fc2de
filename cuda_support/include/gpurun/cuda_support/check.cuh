// check.cuh: the error channel of the project's CUDA code (kernels/cuda, runtime/src/cuda and the
// GPU tests). Every CUDA runtime, cuDNN and cuBLAS call goes through one of these macros; a failure throws std::runtime_error carrying the expression, the
// file:line, the device and the library's own message, so a failure deep inside a training step
// says where it came from. Kernel launches are followed by GPURUN_LAUNCH_CHECK (launch
// configuration errors are reported at once; asynchronous faults surface at the next sync).
// Part of the internal library gpurun_cuda_support: never installed, never included from a
// public header.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "gpurun/cuda_support/launch.cuh"

namespace gpurun::cuda_support {

[[noreturn]] void fail(const char* lib, const std::string& what, const char* expr, const char* file,
                       int line);
const char* cublas_status_name(cublasStatus_t s);

// Once a communicator was aborted the device may still hold kernels that use freed memory, and a
// cudaFree or a handle's destruction can wait on them forever: from then on every owner of device
// memory or a library handle leaves it to the process's end (the watchdog sets this; c10d does
// the same). Thread-safe.
void mark_device_lost() noexcept;
bool device_lost() noexcept;

}  // namespace gpurun::cuda_support

#define GPURUN_CUDA_CHECK(expr)                                                           \
  do {                                                                                    \
    const cudaError_t gpurun_e_ = (expr);                                                 \
    if (gpurun_e_ != cudaSuccess)                                                         \
      ::gpurun::cuda_support::fail("CUDA", cudaGetErrorString(gpurun_e_), #expr, \
                                            __FILE__, __LINE__);                          \
  } while (0)

#define GPURUN_CUDNN_CHECK(expr)                                                            \
  do {                                                                                      \
    const cudnnStatus_t gpurun_s_ = (expr);                                                 \
    if (gpurun_s_ != CUDNN_STATUS_SUCCESS)                                                  \
      ::gpurun::cuda_support::fail("cuDNN", cudnnGetErrorString(gpurun_s_), #expr, \
                                            __FILE__, __LINE__);                            \
  } while (0)

#define GPURUN_CUBLAS_CHECK(expr)                                                          \
  do {                                                                                     \
    const cublasStatus_t gpurun_s_ = (expr);                                               \
    if (gpurun_s_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::gpurun::cuda_support::fail(                                               \
          "cuBLAS", ::gpurun::cuda_support::cublas_status_name(gpurun_s_), #expr, \
          __FILE__, __LINE__);                                                             \
  } while (0)

// After every <<<...>>>: cudaGetLastError, which also clears the error, as llm.c does. With
// cudaPeekAtLastError a non-sticky error left by an earlier call (cudaErrorNotReady from an event
// query, a refused launch already reported) would fail every later launch check; a sticky error
// (an illegal address) is returned by every later call anyway.
#define GPURUN_LAUNCH_CHECK(kernel_name)                                                   \
  do {                                                                                     \
    const cudaError_t gpurun_e_ = cudaGetLastError();                                      \
    if (gpurun_e_ != cudaSuccess)                                                          \
      ::gpurun::cuda_support::fail("CUDA", cudaGetErrorString(gpurun_e_),         \
                                            "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)

// Launches `kernel` on grid x block threads with `smem` bytes of dynamic shared memory on
// `stream`, then checks the launch (GPURUN_LAUNCH_CHECK) under the kernel's own name.
#define GPURUN_LAUNCH(kernel, grid, block, smem, stream, ...)             \
  do {                                                                    \
    GPURUN_KERNEL_LAUNCH(kernel, grid, block, smem, stream, __VA_ARGS__); \
    GPURUN_LAUNCH_CHECK(#kernel);                                         \
  } while (0)

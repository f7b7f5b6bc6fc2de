// types.h: what every op header shares. Ops take raw float pointers, sizes and a small descriptor
// struct; a CPU op gets host pointers, a CUDA op (namespace cuda, kernels/cuda/) device pointers
// and an opaque Stream. No CUDA or MPI header appears here so every consumer builds without them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpurun/kernels/config.h"

namespace gpurun::kernels {

// An opaque CUDA stream (a cudaStream_t cast to void*); nullptr is the legacy default stream.
struct Stream {
  void* handle = nullptr;
};

// Scratch memory an op may use (im2col columns). Sized by the op's *_workspace_floats(); owned by
// the caller so the training step allocates nothing.
struct Workspace {
  float* data = nullptr;
  std::size_t floats = 0;
};

// What an op does after a matrix product: overwrite the output, or add to it (gradient
// accumulation across micro-batches).
enum class Accumulate { kOverwrite, kAdd };

#if GPURUN_KERNELS_HAVE_CUDA
namespace cuda {
// Math of the cuda:: matrix products (cuBLAS) and convolutions (cuDNN). kFp32, the default, keeps
// full FP32 for parity with the CPU path; kTf32 opts in to tensor cores (inputs rounded to a
// 10-bit mantissa), as mnist_cnn --tf32 does. Process-wide; applies to calls made after it.
enum class MathPrecision { kFp32, kTf32 };
void set_math_precision(MathPrecision p);
MathPrecision math_precision();
}  // namespace cuda
#endif

}  // namespace gpurun::kernels

// pool2d.h: 2-D max pooling over NCHW activations (square window, no padding; Keras'
// MaxPooling2D with padding "valid"). The backward pass routes each output's gradient to the
// first maximum of its window in row-major order (as PyTorch's CPU kernel does), so ties are
// resolved the same way by every implementation and the result is deterministic.
//   ref::  plain loops, the test oracle;  cpu::  the same, tuned;  cuda::  kernels/cuda/.
#pragma once

#include "gpurun/kernels/config.h"
#include "gpurun/kernels/types.h"

namespace gpurun::kernels {

struct Pool2dDesc {
  int batch = 0;
  int channels = 0, in_h = 0, in_w = 0;
  int size = 2;    // window: size x size
  int stride = 2;  // Keras' default stride is the window size

  int out_h() const { return (in_h - size) / stride + 1; }
  int out_w() const { return (in_w - size) / stride + 1; }
  std::size_t x_floats() const { return std::size_t(batch) * channels * in_h * in_w; }
  std::size_t y_floats() const { return std::size_t(batch) * channels * out_h() * out_w(); }
};

// Throws std::invalid_argument naming the field when a size is not positive or the window does
// not fit the input.
void validate(const Pool2dDesc& d);

namespace ref {
void max_pool2d_forward(const Pool2dDesc& d, const float* x, float* y);
// dx (overwritten) from x (the forward input) and dy: each dy goes to its window's first maximum.
void max_pool2d_backward(const Pool2dDesc& d, const float* x, const float* dy, float* dx);
}  // namespace ref

namespace cpu {
void max_pool2d_forward(const Pool2dDesc& d, const float* x, float* y);
void max_pool2d_backward(const Pool2dDesc& d, const float* x, const float* dy, float* dx);
}  // namespace cpu

#if GPURUN_KERNELS_HAVE_CUDA
namespace cuda {
void max_pool2d_forward(const Pool2dDesc& d, const float* x, float* y, Stream s);
void max_pool2d_backward(const Pool2dDesc& d, const float* x, const float* dy, float* dx, Stream s);
}  // namespace cuda
#endif

}  // namespace gpurun::kernels

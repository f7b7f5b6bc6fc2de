// conv2d_direct.h (private): a direct convolution for the first layer of an image network: one
// input channel, stride 1, no padding, a 3x3 or 5x5 kernel, at least 16 output columns, NCHW
// and OIHW as the rest of the runtime holds them. oneDNN's fast convolutions want blocked
// channels, and for such a layer the reorders to and from NCHW cost more than the convolution
// itself, while its plain-layout convolution is four to five times slower (measured with oneDNN
// 2.6 on AVX-512). The backward takes the ReLU's mask and the bias gradient in the same pass.
// The loops are written over 16-float vectors and compiled for AVX-512, AVX2 and baseline x86-64
// (simd.h); each clone does the same arithmetic per lane in the same order, so the results are
// the same bits on every machine.
#pragma once

#include <cstddef>

#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"

namespace gpurun::kernels::cpu::direct {

// Whether d is a convolution these kernels take.
bool applies(const Conv2dDesc& d);

// y = act(conv(x, w) + b); b may be nullptr (no bias).
void forward(const Conv2dDesc& d, Activation act, const float* x, const float* w, const float* b,
             float* y);

// Floats of scratch backward() needs (its per-lane partial sums).
std::size_t scratch_floats(const Conv2dDesc& d);

// The backward of forward() to the weights and the bias: dw and db (skipped when nullptr) are
// the batch's sums of dy masked by act'(y) (y: forward()'s output; dy is read, not written),
// overwritten, or, with Accumulate::kAdd, formed first and then added.
void backward(const Conv2dDesc& d, Activation act, const float* x, const float* y, const float* dy,
              float* dw, float* db, Accumulate acc, float* scratch);

}  // namespace gpurun::kernels::cpu::direct

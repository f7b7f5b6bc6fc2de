// bias_act.h: per-channel bias plus an activation, in place, and its backward.
// The tensor is viewed as [outer, channels, inner]: a dense output is [batch, out, 1], a conv
// output [batch, out_c, out_h*out_w]; bias has `channels` floats.
#pragma once

#include "gpurun/kernels/config.h"
#include "gpurun/kernels/types.h"

namespace gpurun::kernels {

enum class Activation { kNone, kRelu };

struct BiasActDesc {
  int outer = 0;
  int channels = 0;
  int inner = 1;
  Activation act = Activation::kRelu;

  std::size_t floats() const { return std::size_t(outer) * channels * inner; }
};

void validate(const BiasActDesc& d);

namespace ref {
// y = act(y + b), in place; b == nullptr means no bias (a ReLU layer is channels 1 and no bias).
void bias_act_forward(const BiasActDesc& d, float* y, const float* b);
// Given the activated output y and dL/dy: dx = dL/dy * act'(y) (written over dy, in place) and
// db = sum of dx over outer and inner (skipped when db is nullptr). With Accumulate::kAdd the
// batch's sum is formed first and then added to db, so accumulating micro-batches adds the same
// partial sums, in the same order, as an allreduce of per-rank gradients does.
void bias_act_backward(const BiasActDesc& d, const float* y, float* dy, float* db,
                       Accumulate acc = Accumulate::kOverwrite);
}  // namespace ref

namespace cpu {
void bias_act_forward(const BiasActDesc& d, float* y, const float* b);
void bias_act_backward(const BiasActDesc& d, const float* y, float* dy, float* db,
                       Accumulate acc = Accumulate::kOverwrite);
}  // namespace cpu

#if GPURUN_KERNELS_HAVE_CUDA
namespace cuda {
void bias_act_forward(const BiasActDesc& d, float* y, const float* b, Stream s);
void bias_act_backward(const BiasActDesc& d, const float* y, float* dy, float* db, Accumulate acc,
                       Stream s);
}  // namespace cuda
#endif

}  // namespace gpurun::kernels

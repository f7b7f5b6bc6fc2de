// softmax_xent.h: fused, numerically stable softmax cross-entropy; loss and gradient in one pass.
// logits [batch, classes], labels int32 [batch] in [0, classes).
//   loss_sum[0]   = sum over the batch of -log softmax(logits)[label]   (a sum, not a mean, so
//                   ranks and micro-batches can add them)
//   dlogits       = grad_scale * (softmax(logits) - onehot(label))      (grad_scale = 1/global
//                   batch makes the gradient that of the mean loss); may alias logits.
// A label out of range throws std::out_of_range naming its position (cpu/ref).
#pragma once

#include "gpurun/kernels/config.h"
#include "gpurun/kernels/types.h"

namespace gpurun::kernels {

struct SoftmaxXentDesc {
  int batch = 0;
  int classes = 0;
  float grad_scale = 1.0f;
};

void validate(const SoftmaxXentDesc& d);

namespace ref {
void softmax_xent(const SoftmaxXentDesc& d, const float* logits, const std::int32_t* labels,
                  float* dlogits, float* loss_sum);
}  // namespace ref

namespace cpu {
void softmax_xent(const SoftmaxXentDesc& d, const float* logits, const std::int32_t* labels,
                  float* dlogits, float* loss_sum);
}  // namespace cpu

#if GPURUN_KERNELS_HAVE_CUDA
namespace cuda {
// loss_sum is a device pointer (one float).
void softmax_xent(const SoftmaxXentDesc& d, const float* logits, const std::int32_t* labels,
                  float* dlogits, float* loss_sum, Stream s);
}  // namespace cuda
#endif

}  // namespace gpurun::kernels

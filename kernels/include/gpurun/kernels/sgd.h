// sgd.h: one SGD step over a flat parameter buffer, PyTorch's torch.optim.SGD semantics:
//   g = grad_scale * grad + weight_decay * p
//   v = momentum * v + g        (only when momentum != 0; v starts at 0)
//   p = p - lr * v              (p - lr * g without momentum)
// grad_scale folds the 1/world_size of a summed allreduce into the update, so averaging costs no
// extra pass over the 11 MB gradient buffer.
#pragma once

#include "gpurun/kernels/config.h"
#include "gpurun/kernels/types.h"

namespace gpurun::kernels {

struct SgdDesc {
  std::size_t n = 0;
  float lr = 0.0f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;
};

// Throws std::invalid_argument on a negative lr/momentum/weight_decay.
void validate(const SgdDesc& d);

namespace ref {
// velocity may be nullptr only when momentum == 0.
void sgd_step(const SgdDesc& d, float* params, const float* grads, float* velocity);
}  // namespace ref

namespace cpu {
void sgd_step(const SgdDesc& d, float* params, const float* grads, float* velocity);
}  // namespace cpu

#if GPURUN_KERNELS_HAVE_CUDA
namespace cuda {
void sgd_step(const SgdDesc& d, float* params, const float* grads, float* velocity, Stream s);
// The same step with the learning rate read from device memory (one float) when the kernel runs,
// so a training step captured once in a CUDA Graph follows a learning-rate schedule; d.lr is
// ignored.
void sgd_step_device_lr(const SgdDesc& d, const float* lr_device, float* params, const float* grads,
                        float* velocity, Stream s);
}  // namespace cuda
#endif

}  // namespace gpurun::kernels

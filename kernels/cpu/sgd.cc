// sgd.cc: the SGD update over the flat parameter buffer (PyTorch semantics, see sgd.h). One pass,
// memory bound: 11 MB of params, grads and (with momentum) velocity per step for the MNIST CNN.
#include "gpurun/kernels/sgd.h"

#include <stdexcept>

namespace gpurun::kernels {

namespace ref {
void sgd_step(const SgdDesc& d, float* params, const float* grads, float* velocity) {
  validate(d);
  if (d.momentum != 0.0f && velocity == nullptr) {
    throw std::invalid_argument("sgd: momentum needs a velocity buffer");
  }
  for (std::size_t i = 0; i < d.n; ++i) {
    double g = double(d.grad_scale) * grads[i] + double(d.weight_decay) * params[i];
    if (d.momentum != 0.0f) {
      velocity[i] = float(double(d.momentum) * velocity[i] + g);
      g = velocity[i];
    }
    params[i] = float(params[i] - double(d.lr) * g);
  }
}
}  // namespace ref

namespace cpu {
void sgd_step(const SgdDesc& d, float* params, const float* grads, float* velocity) {
  validate(d);
  const float lr = d.lr, m = d.momentum, wd = d.weight_decay, gs = d.grad_scale;
  const std::size_t n = d.n;
  if (m == 0.0f) {
    for (std::size_t i = 0; i < n; ++i) params[i] -= lr * (gs * grads[i] + wd * params[i]);
    return;
  }
  if (velocity == nullptr) throw std::invalid_argument("sgd: momentum needs a velocity buffer");
  for (std::size_t i = 0; i < n; ++i) {
    const float v = m * velocity[i] + (gs * grads[i] + wd * params[i]);
    velocity[i] = v;
    params[i] -= lr * v;
  }
}
}  // namespace cpu

}  // namespace gpurun::kernels

// sgd.cc: the SGD update over the flat parameter buffer (PyTorch semantics, see sgd.h). One pass,
// memory bound: 11 MB of params, grads and (with momentum) velocity per step for the MNIST CNN.
#include "gpurun/kernels/sgd.h"

#include <stdexcept>

#include "simd.h"

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
namespace {
GPURUN_SIMD_CLONES void plain_step(std::size_t n, float lr, float gs, float wd, float* p,
                                   const float* g) {
  for (std::size_t i = 0; i < n; ++i) p[i] -= lr * (gs * g[i] + wd * p[i]);
}
GPURUN_SIMD_CLONES void momentum_step(std::size_t n, float lr, float m, float gs, float wd,
                                      float* p, const float* g, float* v) {
  for (std::size_t i = 0; i < n; ++i) {
    const float vi = m * v[i] + (gs * g[i] + wd * p[i]);
    v[i] = vi;
    p[i] -= lr * vi;
  }
}
}  // namespace

void sgd_step(const SgdDesc& d, float* params, const float* grads, float* velocity) {
  validate(d);
  if (d.momentum == 0.0f) {
    plain_step(d.n, d.lr, d.grad_scale, d.weight_decay, params, grads);
    return;
  }
  if (velocity == nullptr) throw std::invalid_argument("sgd: momentum needs a velocity buffer");
  momentum_step(d.n, d.lr, d.momentum, d.grad_scale, d.weight_decay, params, grads, velocity);
}
}  // namespace cpu

}  // namespace gpurun::kernels

// sgd.cu: cuda:: SGD step over the flat parameter buffer (sgd.h), with the 1/world gradient
// scaling folded in so averaging the allreduced sum costs no extra pass. The device-lr variant
// reads the learning rate when the kernel runs, so one captured CUDA Graph can follow a warmup
// schedule. Tested against the CPU twin by tests/kernels/cuda (ctest -L gpu).
#include <stdexcept>

#include "gpurun/cuda_support/check.cuh"
#include "context.cuh"
#include "gpurun/kernels/sgd.h"

namespace gpurun::kernels::cuda {
namespace {

constexpr int kBlock = 256;  // also its GPURUN_KERNEL_BOUNDS

// Same operation order as cpu::sgd_step, so results agree to rounding of fused multiply-adds.
template <bool kMomentum>
__global__ void GPURUN_KERNEL_BOUNDS(kBlock)
    sgd_kernel(std::size_t n, float lr_host, const float* __restrict__ lr_dev, float wd, float gs,
               float m, float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v) {
  const float lr = lr_dev ? *lr_dev : lr_host;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float gi = gs * g[i] + wd * p[i];
    if (kMomentum) {
      const float vi = m * v[i] + gi;
      v[i] = vi;
      p[i] -= lr * vi;
    } else {
      p[i] -= lr * gi;
    }
  }
}

void launch(const SgdDesc& d, const float* lr_dev, float* params, const float* grads,
            float* velocity, Stream s) {
  validate(d);
  if (d.n == 0) return;
  const bool mom = d.momentum != 0.0f;
  if (mom && velocity == nullptr)
    throw std::invalid_argument("sgd: momentum needs a velocity buffer");
  const int grid = detail::grid_blocks(d.n, kBlock);
  if (mom) {
    GPURUN_LAUNCH(sgd_kernel<true>, grid, kBlock, 0, detail::raw(s), d.n, d.lr, lr_dev,
                  d.weight_decay, d.grad_scale, d.momentum, params, grads, velocity);
  } else {
    GPURUN_LAUNCH(sgd_kernel<false>, grid, kBlock, 0, detail::raw(s), d.n, d.lr, lr_dev,
                  d.weight_decay, d.grad_scale, 0.0f, params, grads, nullptr);
  }
}

}  // namespace

void sgd_step(const SgdDesc& d, float* params, const float* grads, float* velocity, Stream s) {
  launch(d, nullptr, params, grads, velocity, s);
}

void sgd_step_device_lr(const SgdDesc& d, const float* lr_device, float* params, const float* grads,
                        float* velocity, Stream s) {
  if (lr_device == nullptr) throw std::invalid_argument("sgd: lr_device is null");
  launch(d, lr_device, params, grads, velocity, s);
}

}  // namespace gpurun::kernels::cuda

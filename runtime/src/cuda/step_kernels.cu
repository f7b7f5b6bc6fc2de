// step_kernels.cu: batch gather from the device-resident dataset and the step counter advance.
// See step_kernels.h.
#include "gpurun/cuda_support/check.cuh"
#include "step_kernels.h"

namespace gpurun::runtime::cuda {
namespace {

constexpr int kGatherThreads = 256;  // also its GPURUN_KERNEL_BOUNDS

// One block per image: 784 pixels is a coalesced run of bytes in, floats out.
__global__ void GPURUN_KERNEL_BOUNDS(kGatherThreads)
    gather_kernel(const std::uint8_t* __restrict__ pixels, const std::int32_t* __restrict__ labels,
                  std::size_t img, const std::int32_t* __restrict__ idx,
                  const int* __restrict__ step, int n, const float* __restrict__ lr_table,
                  float* __restrict__ lr_out, float* __restrict__ x, std::int32_t* __restrict__ y) {
  const std::size_t base = step ? std::size_t(*step) * std::size_t(n) : 0;
  const int k = blockIdx.x;
  const std::size_t i = std::size_t(idx[base + k]);
  const std::uint8_t* src = pixels + i * img;
  float* dst = x + std::size_t(k) * img;
  constexpr float kScale = 1.0f / 255.0f;  // Split::gather's arithmetic, bit for bit
  for (std::size_t p = threadIdx.x; p < img; p += blockDim.x) dst[p] = float(src[p]) * kScale;
  if (threadIdx.x == 0) {
    y[k] = labels[i];
    if (k == 0 && lr_out) *lr_out = lr_table[step ? *step : 0];
  }
}

__global__ void GPURUN_KERNEL_BOUNDS(1)
    advance_kernel(int* step, const float* loss, const std::int64_t* correct, float* loss_hist,
                   std::int64_t* correct_hist) {
  const int s = *step;
  loss_hist[s] = *loss;
  correct_hist[s] = *correct;
  *step = s + 1;
}

}  // namespace

void gather_batch(const std::uint8_t* pixels, const std::int32_t* labels, std::size_t image_floats,
                  const std::int32_t* idx, const int* step, int n, const float* lr_table,
                  float* lr_out, float* x, std::int32_t* y, kernels::Stream s) {
  if (n <= 0) return;
  GPURUN_LAUNCH(gather_kernel, n, kGatherThreads, 0, static_cast<cudaStream_t>(s.handle), pixels,
                labels, image_floats, idx, step, n, lr_table, lr_out, x, y);
}

void advance_step(int* step, const float* loss, const std::int64_t* correct, float* loss_hist,
                  std::int64_t* correct_hist, kernels::Stream s) {
  GPURUN_LAUNCH(advance_kernel, 1, 1, 0, static_cast<cudaStream_t>(s.handle), step, loss, correct,
                loss_hist, correct_hist);
}

}  // namespace gpurun::runtime::cuda

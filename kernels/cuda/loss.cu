// loss.cu: cuda:: fused softmax cross-entropy (loss sum and gradient in one pass) and the arg-max
// accuracy count (softmax_xent.h, accuracy.h). One thread per row: with 10 classes a row is 40
// bytes, so a warp per row would idle most lanes. Both run as ONE block so the batch sum is
// written (not accumulated) in a fixed order: deterministic, and no memset node is needed before
// it in a captured graph. Tested against the CPU twins by tests/kernels/cuda (ctest -L gpu).
#include <cmath>

#include "gpurun/cuda_support/check.cuh"
#include "context.cuh"
#include "gpurun/kernels/accuracy.h"
#include "gpurun/kernels/softmax_xent.h"

namespace gpurun::kernels::cuda {
namespace {

constexpr int kThreads = 1024;

// Block-wide sum of one double per thread; the result is valid in thread 0.
__device__ double block_sum(double v, double* shared /* kThreads / 32 */) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? shared[lane] : 0.0;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

// The same arithmetic as cpu::softmax_xent in float: max, exp(z - max) stored in the gradient,
// sum, loss = log(sum) - (z_label - max), then scale. dlogits may alias logits: z[c] is read
// before g[c] is written, by the same thread. A label outside [0, classes) cannot throw on the
// device: its row contributes NaN to the loss (so the caller sees it) and no one-hot term.
__global__ void GPURUN_KERNEL_BOUNDS(kThreads)
    softmax_xent_kernel(const float* logits, const std::int32_t* __restrict__ labels,
                        float* dlogits, float* __restrict__ loss_sum, int batch, int classes,
                        float grad_scale) {
  __shared__ double warp_part[kThreads / 32];
  double total = 0;
  for (int n = threadIdx.x; n < batch; n += blockDim.x) {
    const float* z = logits + std::size_t(n) * classes;
    float* g = dlogits + std::size_t(n) * classes;
    const int label = labels[n];
    const bool ok = label >= 0 && label < classes;
    float m = z[0];
    for (int c = 1; c < classes; ++c) m = z[c] > m ? z[c] : m;
    const float zl = ok ? z[label] : 0.0f;
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) {
      const float e = expf(z[c] - m);
      g[c] = e;
      sum += e;
    }
    total += ok ? double(logf(sum) - (zl - m)) : double(NAN);
    const float scale = grad_scale / sum;
    for (int c = 0; c < classes; ++c) g[c] *= scale;
    if (ok) g[label] -= grad_scale;
  }
  total = block_sum(total, warp_part);
  if (threadIdx.x == 0) *loss_sum = float(total);
}

// First maximum wins (torch.argmax); a label out of range never matches.
__global__ void GPURUN_KERNEL_BOUNDS(kThreads)
    accuracy_kernel(const float* __restrict__ logits, const std::int32_t* __restrict__ labels,
                    std::int64_t* __restrict__ correct, int batch, int classes) {
  __shared__ double warp_part[kThreads / 32];
  double hits = 0;  // exact: counts stay far below 2^53
  for (int n = threadIdx.x; n < batch; n += blockDim.x) {
    const float* z = logits + std::size_t(n) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    hits += best == labels[n] ? 1.0 : 0.0;
  }
  hits = block_sum(hits, warp_part);
  if (threadIdx.x == 0) *correct = std::int64_t(hits);
}

}  // namespace

void softmax_xent(const SoftmaxXentDesc& d, const float* logits, const std::int32_t* labels,
                  float* dlogits, float* loss_sum, Stream s) {
  validate(d);
  GPURUN_LAUNCH(softmax_xent_kernel, 1, kThreads, 0, detail::raw(s), logits, labels, dlogits,
                loss_sum, d.batch, d.classes, d.grad_scale);
}

void accuracy_count(const AccuracyDesc& d, const float* logits, const std::int32_t* labels,
                    std::int64_t* correct, Stream s) {
  validate(d);
  GPURUN_LAUNCH(accuracy_kernel, 1, kThreads, 0, detail::raw(s), logits, labels, correct, d.batch,
                d.classes);
}

}  // namespace gpurun::kernels::cuda

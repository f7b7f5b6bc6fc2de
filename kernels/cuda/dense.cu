// dense.cu: cuda:: dense layer products with cuBLAS (dense.h). cuBLAS is column-major; a row-major
// [rows, cols] matrix is the column-major [cols, rows] matrix, i.e. its transpose, so each
// row-major product C = A*B is issued as C^T = B^T * A^T with no copies:
//   y  [B,out] = x [B,in] * w^T      ->  y^T  = op_T(w_cm) * x_cm          (m=out, n=B,   k=in)
//   dw [out,in] = dy^T * x           ->  dw^T = x_cm * op_T(dy_cm)         (m=in,  n=out, k=B)
//   dx [B,in]  = dy * w              ->  dx^T = w_cm * dy_cm               (m=in,  n=B,   k=out)
// FP32 by default; TF32 tensor cores only after set_math_precision(kTf32).
// dW of a narrow layer (out <= kSmallDwOut, in * out <= kSmallDwFloats) is a kernel of ours: for
// the MNIST CNN's 128 -> 10 layer at batch 256, cuBLAS took a split-K product of 54 us on an H200
// (the step's largest kernel) for 0.3 MFLOP. There a block takes 32 inputs of one output; its
// warps sum the batch's rows in a fixed interleave, then lane i of warp 0 sums their partials in
// warp order: the same bits on every run.
// Tested against the CPU twin by tests/kernels/cuda (ctest -L gpu).
#include "gpurun/cuda_support/check.cuh"
#include "context.cuh"
#include "gpurun/kernels/dense.h"

namespace gpurun::kernels::cuda {
namespace {

constexpr int kDwThreads = 1024;  // also its GPURUN_KERNEL_BOUNDS
constexpr int kDwWarps = kDwThreads / 32;
constexpr int kSmallDwOut = 64;
constexpr long kSmallDwFloats = 1 << 16;

// dw[o][i] (= or +=) sum over b of dy[b][o] * x[b][i]: block (i / 32, o); warp w sums rows
// b = w, w + kDwWarps, ...
__global__ void GPURUN_KERNEL_BOUNDS(kDwThreads)
    small_dw_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                    float* __restrict__ dw, DenseDesc d, bool add) {
  __shared__ float part[kDwWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x * 32 + lane, o = blockIdx.y;
  float s = 0.0f;
  if (i < d.in) {
    for (int b = warp; b < d.batch; b += kDwWarps)
      s = fmaf(dy[std::size_t(b) * d.out + o], x[std::size_t(b) * d.in + i], s);
  }
  part[warp][lane] = s;
  __syncthreads();
  if (warp != 0 || i >= d.in) return;
  float t = 0.0f;
  for (int w = 0; w < kDwWarps; ++w) t += part[w][lane];
  float* dst = dw + std::size_t(o) * d.in + i;
  *dst = add ? *dst + t : t;
}

bool small_dw(const DenseDesc& d) {
  return d.out <= kSmallDwOut && long(d.in) * d.out <= kSmallDwFloats;
}

}  // namespace

void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y, Stream s) {
  validate(d);
  const float one = 1.0f, zero = 0.0f;
  GPURUN_CUBLAS_CHECK(cublasSgemm(detail::cublas_on(s), CUBLAS_OP_T, CUBLAS_OP_N, d.out, d.batch,
                                  d.in, &one, w, d.in, x, d.in, &zero, y, d.out));
}

void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc, Stream s) {
  validate(d);
  if (small_dw(d)) {
    const dim3 grid((d.in + 31) / 32, d.out);
    GPURUN_LAUNCH(small_dw_kernel, grid, kDwThreads, 0, detail::raw(s), x, dy, dw, d,
                  acc == Accumulate::kAdd);
    return;
  }
  const float one = 1.0f, beta = acc == Accumulate::kAdd ? 1.0f : 0.0f;
  GPURUN_CUBLAS_CHECK(cublasSgemm(detail::cublas_on(s), CUBLAS_OP_N, CUBLAS_OP_T, d.in, d.out,
                                  d.batch, &one, x, d.in, dy, d.out, &beta, dw, d.in));
}

void dense_backward_data(const DenseDesc& d, const float* w, const float* dy, float* dx, Stream s) {
  validate(d);
  const float one = 1.0f, zero = 0.0f;
  GPURUN_CUBLAS_CHECK(cublasSgemm(detail::cublas_on(s), CUBLAS_OP_N, CUBLAS_OP_N, d.in, d.batch,
                                  d.out, &one, w, d.in, dy, d.out, &zero, dx, d.in));
}

}  // namespace gpurun::kernels::cuda

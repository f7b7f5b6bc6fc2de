// dense.h: fully connected layer without bias (bias + activation is bias_act.h).
// x [batch, in], w [out, in] (PyTorch's Linear layout), y [batch, out]:  y = x * w^T.
//   ref::  plain loops (double accumulation), the test oracle;  cpu::  OpenBLAS sgemm;
//   cuda:: cuBLAS, in kernels/cuda/.
#pragma once

#include "gpurun/kernels/config.h"
#include "gpurun/kernels/types.h"

namespace gpurun::kernels {

struct DenseDesc {
  int batch = 0;
  int in = 0;
  int out = 0;
};

// Throws std::invalid_argument when a size is not positive.
void validate(const DenseDesc& d);

namespace ref {
void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y);
// dw [out, in] = dy^T * x
void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc = Accumulate::kOverwrite);
// dx [batch, in] = dy * w
void dense_backward_data(const DenseDesc& d, const float* w, const float* dy, float* dx);
void dense_weight_cols(const DenseDesc& d, const float* x, const float* dy, int lo, int hi,
                       float alpha, float beta, float* c);
void dense_forward_cols(const DenseDesc& d, const float* x, const float* w, int lo, int hi,
                        float* y);
void dense_backward_data_cols(const DenseDesc& d, const float* w, const float* dy, int lo, int hi,
                              float* dx);
void dense_backward_weights_rows(const DenseDesc& d, const float* x, const float* dy, int lo,
                                 int hi, float* dw, Accumulate acc = Accumulate::kOverwrite);
}  // namespace ref

// Columns [lo, hi) of an [out, in] matrix c (the weights of inputs lo..hi-1):
// c[:, lo:hi] = beta * c[:, lo:hi] + alpha * dy^T * x[:, lo:hi]. With beta 0 and alpha 1 that is
// a share of dW; with c = w, beta 1 and alpha = -lr / N it is the SGD step fused into the weight
// gradient (no dW written, no separate pass over the weights). x and dy may hold several ranks'
// batches one after another (d.batch counts them all): the product then sums every rank's
// gradient, which is how the shared-memory exchange updates the weights by columns from
// all ranks' activations (runtime/src/cpu/exchange_shared.cc). A chunk of columns reads only its
// columns of x, so the chunks together read x once.
//
// The products of inputs [lo, hi) alone, for ranks that split a layer's weights between them by
// columns (each reads and writes only its own columns of w):
//   dense_forward_cols:       y [batch, out] = x[:, lo:hi] * w[:, lo:hi]^T, a partial sum of y;
//   dense_backward_data_cols: dx[:, lo:hi] = dy * w[:, lo:hi]; dx's other columns untouched.
// All three throw std::invalid_argument when [lo, hi) is not inside [0, in).
//
// Rows [lo, hi) of dW (the weights of outputs lo..hi-1, contiguous in memory), for the allreduce
// that starts summing a piece of dW while backward computes the next (--bucket-mb):
//   dense_backward_weights_rows: dw[lo:hi, :] = dy[:, lo:hi]^T * x, those rows of
//   dense_backward_weights within rounding (the BLAS may sum a block of rows in another order
//   than the whole: on AMD Zen, oneDNN and OpenBLAS do, 1 ulp apart); throws
//   std::invalid_argument when [lo, hi) is not in [0, out).
namespace cpu {
void dense_weight_cols(const DenseDesc& d, const float* x, const float* dy, int lo, int hi,
                       float alpha, float beta, float* c);
void dense_forward_cols(const DenseDesc& d, const float* x, const float* w, int lo, int hi,
                        float* y);
void dense_backward_data_cols(const DenseDesc& d, const float* w, const float* dy, int lo, int hi,
                              float* dx);
void dense_backward_weights_rows(const DenseDesc& d, const float* x, const float* dy, int lo,
                                 int hi, float* dw, Accumulate acc = Accumulate::kOverwrite);
void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y);
void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc = Accumulate::kOverwrite);
void dense_backward_data(const DenseDesc& d, const float* w, const float* dy, float* dx);
}  // namespace cpu

#if GPURUN_KERNELS_HAVE_CUDA
namespace cuda {
void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y, Stream s);
void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc, Stream s);
void dense_backward_data(const DenseDesc& d, const float* w, const float* dy, float* dx, Stream s);
}  // namespace cuda
#endif

}  // namespace gpurun::kernels

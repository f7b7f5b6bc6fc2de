// dense.h: fully connected layer without bias (bias + activation is bias_act.h).
// x [batch, in], w [out, in] (PyTorch's Linear layout), y [batch, out]:  y = x * w^T.
//   ref::  plain loops (double accumulation), the test oracle;  cpu::  OpenBLAS sgemm;
//   cuda:: cuBLAS, in kernels/cuda/.
#pragma once

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
}  // namespace ref

namespace cpu {
// w += alpha * dy^T * x in one sgemm: the SGD step fused into the weight gradient (alpha = -lr),
// which saves writing dW and a separate pass over the weights.
void dense_update_weights(const DenseDesc& d, const float* x, const float* dy, float alpha,
                          float* w);
void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y);
void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc = Accumulate::kOverwrite);
void dense_backward_data(const DenseDesc& d, const float* w, const float* dy, float* dx);
}  // namespace cpu

namespace cuda {
void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y, Stream s);
void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc, Stream s);
void dense_backward_data(const DenseDesc& d, const float* w, const float* dy, float* dx, Stream s);
}  // namespace cuda

}  // namespace gpurun::kernels

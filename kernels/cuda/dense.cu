// dense.cu: cuda:: dense layer products with cuBLAS (dense.h). cuBLAS is column-major; a row-major
// [rows, cols] matrix is the column-major [cols, rows] matrix, i.e. its transpose, so each
// row-major product C = A*B is issued as C^T = B^T * A^T with no copies:
//   y  [B,out] = x [B,in] * w^T      ->  y^T  = op_T(w_cm) * x_cm          (m=out, n=B,   k=in)
//   dw [out,in] = dy^T * x           ->  dw^T = x_cm * op_T(dy_cm)         (m=in,  n=out, k=B)
//   dx [B,in]  = dy * w              ->  dx^T = w_cm * dy_cm               (m=in,  n=B,   k=out)
// FP32 by default; TF32 tensor cores only after set_math_precision(kTf32).
// Tested against the CPU twin by tests/kernels/cuda (ctest -L gpu).
#include "gpurun/cuda_support/check.cuh"
#include "context.cuh"
#include "gpurun/kernels/dense.h"

namespace gpurun::kernels::cuda {

void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y, Stream s) {
  validate(d);
  const float one = 1.0f, zero = 0.0f;
  GPURUN_CUBLAS_CHECK(cublasSgemm(detail::cublas_on(s), CUBLAS_OP_T, CUBLAS_OP_N, d.out, d.batch,
                                  d.in, &one, w, d.in, x, d.in, &zero, y, d.out));
}

void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc, Stream s) {
  validate(d);
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

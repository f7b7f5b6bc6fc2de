// gemm.h (private): the one row-major sgemm the cpu:: ops call. It runs on the library
// set_cpu_kernels() chose (cpu_kernels.h): OpenBLAS, oneDNN or BLIS.
#pragma once

namespace gpurun::kernels::cpu::detail {

enum class Trans { kNo, kYes };

// C[m x n] = alpha op(A)[m x k] op(B)[k x n] + beta C, all row-major with leading dimensions.
void sgemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

}  // namespace gpurun::kernels::cpu::detail

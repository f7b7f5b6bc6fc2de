// onednn.h (private): the cpu:: ops on oneDNN (cpu_kernels.h, CpuKernels::kOneDnn). Primitives
// are created once per shape and reused; oneDNN's library scratchpad requires a primitive to run
// on the thread that created it, so each thread keeps its own (the worker threads of --threads
// each run their own shapes anyway). Every call runs on as many OpenMP threads as
// set_num_threads() says. Built only when CMake found oneDNN (GPURUN_HAVE_ONEDNN).
#pragma once

#include <string>

#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"

namespace gpurun::kernels::cpu::onednn {

// Row-major C[m x n] = alpha op(A) op(B) + beta C, op() a transposition when ta/tb; beta is 0
// or 1 in this project's calls (other values work, one primitive per value).
void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// Convolution + bias + activation in one primitive (b may be nullptr: no bias).
void conv_forward(const Conv2dDesc& d, Activation act, const float* x, const float* w,
                  const float* b, float* y);
void conv_backward_weights(const Conv2dDesc& d, const float* x, const float* dy, float* dw);
void conv_backward_data(const Conv2dDesc& d, const float* w, const float* dy, float* dx);

void set_threads(int n);
std::string info();  // "oneDNN 2.6.3 (avx512_core_bf16)": version and the ISA it dispatches to

}  // namespace gpurun::kernels::cpu::onednn

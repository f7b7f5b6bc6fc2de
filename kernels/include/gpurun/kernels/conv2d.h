// conv2d.h: 2-D convolution (cross-correlation, as in every framework), NCHW activations, OIHW
// weights [out_c, in_c, k_h, k_w], no bias (bias + activation is bias_act.h). Forward, backward to
// the weights and backward to the input. Three implementations share these signatures:
//   ref::  plain loops, the test oracle;  cpu::  oneDNN primitives, or im2col + sgemm on the
//   chosen CPU library (cpu_kernels.h);  cuda::  kernels/cuda/.
#pragma once

#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/config.h"
#include "gpurun/kernels/types.h"

namespace gpurun::kernels {

struct Conv2dDesc {
  int batch = 0;
  int in_c = 0, in_h = 0, in_w = 0;
  int out_c = 0, k_h = 0, k_w = 0;
  int stride = 1, pad = 0;

  int out_h() const { return (in_h + 2 * pad - k_h) / stride + 1; }
  int out_w() const { return (in_w + 2 * pad - k_w) / stride + 1; }
  std::size_t x_floats() const { return std::size_t(batch) * in_c * in_h * in_w; }
  std::size_t y_floats() const { return std::size_t(batch) * out_c * out_h() * out_w(); }
  std::size_t w_floats() const { return std::size_t(out_c) * in_c * k_h * k_w; }
};

// Throws std::invalid_argument naming the bad field when a size is not positive or the kernel
// does not fit the padded input.
void validate(const Conv2dDesc& d);

namespace ref {
// y[n,o,i,j] = sum_{c,p,q} w[o,c,p,q] * x[n,c,i*s-pad+p, j*s-pad+q]
void conv2d_forward(const Conv2dDesc& d, const float* x, const float* w, float* y);
// dw = sum over the batch (overwrites dw; with Accumulate::kAdd the batch's sum is formed first and
// then added, so micro-batch accumulation matches an allreduce of per-rank sums bit for bit)
void conv2d_backward_weights(const Conv2dDesc& d, const float* x, const float* dy, float* dw,
                             Accumulate acc = Accumulate::kOverwrite);
// dx overwritten
void conv2d_backward_data(const Conv2dDesc& d, const float* w, const float* dy, float* dx);
}  // namespace ref

namespace cpu {
// Floats of scratch the cpu:: ops need (one image's im2col columns, plus one dw for kAdd).
std::size_t conv2d_workspace_floats(const Conv2dDesc& d);
void conv2d_forward(const Conv2dDesc& d, const float* x, const float* w, float* y, Workspace ws);
void conv2d_backward_weights(const Conv2dDesc& d, const float* x, const float* dy, float* dw,
                             Workspace ws, Accumulate acc = Accumulate::kOverwrite);
void conv2d_backward_data(const Conv2dDesc& d, const float* w, const float* dy, float* dx,
                          Workspace ws);
// y = act(conv(x, w) + b): one fused primitive with oneDNN, else conv2d_forward and
// bias_act_forward (bias_act.h; b may be nullptr).
void conv2d_bias_act_forward(const Conv2dDesc& d, Activation act, const float* x, const float* w,
                             const float* b, float* y, Workspace ws);
// The backward of conv2d_bias_act_forward to the weights and the bias only (a first layer, whose
// input needs no gradient): dw and db (db may be nullptr) as bias_act_backward followed by
// conv2d_backward_weights give them, in one pass over y and dy when the direct kernels take d;
// dy is left masked by act'(y), or as it was.
void conv2d_bias_act_backward_weights(const Conv2dDesc& d, Activation act, const float* x,
                                      const float* y, float* dy, float* dw, float* db, Workspace ws,
                                      Accumulate acc = Accumulate::kOverwrite);
// Whether each output channel's values from the two calls above are the same bits whatever
// other output channels the call covers (true for the direct kernels, whose arithmetic is per
// channel in a fixed order; a library's GEMM may block the channels differently). A caller that
// needs bits independent of how it groups the channels calls one channel at a time otherwise.
bool conv2d_channels_independent(const Conv2dDesc& d);
}  // namespace cpu

#if GPURUN_KERNELS_HAVE_CUDA
namespace cuda {
// How cuDNN's algorithms are chosen for a shape. kBenchmark (the default) times each algorithm
// once and keeps the fastest deterministic one: when two are about as fast, two processes may
// choose differently, and then their sums differ in the last bits. kHeuristic takes cuDNN's
// heuristics' choice, the same in every process on the same GPU and libraries, so a run repeats
// bit for bit (as PyTorch's cudnn.benchmark = False). Process-wide; for shapes planned after it.
enum class ConvAlgoChoice { kBenchmark, kHeuristic };
void set_conv_algo_choice(ConvAlgoChoice c);
ConvAlgoChoice conv_algo_choice();
// Implemented in kernels/cuda/ when GPURUN_ENABLE_CUDA; device pointers, asynchronous on `s`.
// The workspace the shape's chosen algorithms need: call it at setup, outside any graph capture
// (with kBenchmark it runs every algorithm).
std::size_t conv2d_workspace_floats(const Conv2dDesc& d);
void conv2d_forward(const Conv2dDesc& d, const float* x, const float* w, float* y, Workspace ws,
                    Stream s);
void conv2d_backward_weights(const Conv2dDesc& d, const float* x, const float* dy, float* dw,
                             Workspace ws, Accumulate acc, Stream s);
void conv2d_backward_data(const Conv2dDesc& d, const float* w, const float* dy, float* dx,
                          Workspace ws, Stream s);
// Whether the direct kernels (conv_direct.cu) take d: at most 32 taps (in_c * k_h * k_w) and 256
// output channels, a network's first layers. conv2d_workspace_floats() includes what they need.
bool conv2d_direct(const Conv2dDesc& d);
std::size_t conv2d_direct_workspace_floats(const Conv2dDesc& d);
// y = act(conv(x, w) + b) (b may be nullptr): one direct kernel when conv2d_direct(d), else
// conv2d_forward and bias_act_forward.
void conv2d_bias_act_forward(const Conv2dDesc& d, Activation act, const float* x, const float* w,
                             const float* b, float* y, Workspace ws, Stream s);
// The backward of conv2d_bias_act_forward to the weights and the bias only (a first layer, whose
// input needs no gradient): dw and db (db may be nullptr), with the sums in a fixed order (the
// same bits run to run). Direct: dy is left as it was; else it is masked by act'(y) on the way.
void conv2d_bias_act_backward_weights(const Conv2dDesc& d, Activation act, const float* x,
                                      const float* y, float* dy, float* dw, float* db,
                                      Workspace ws, Accumulate acc, Stream s);
}  // namespace cuda
#endif

}  // namespace gpurun::kernels

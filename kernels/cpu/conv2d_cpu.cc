// conv2d_cpu.cc: the fast CPU convolution. With oneDNN (cpu_kernels.h) each op is one oneDNN
// primitive, the forward with bias and activation fused, except that a first layer's
// single-channel convolution runs the direct kernels of conv2d_direct.h; otherwise, per image,
// im2col into the caller's workspace and one sgemm on the chosen library. The workspace keeps
// the training step free of allocations.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "gemm.h"
#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/cpu_kernels.h"
#if GPURUN_HAVE_ONEDNN
#include "conv2d_direct.h"
#include "onednn.h"
#endif

namespace gpurun::kernels::cpu {
namespace {

using detail::sgemm;
using detail::Trans;

bool on_onednn() {
  return GPURUN_HAVE_ONEDNN && cpu_kernels() == CpuKernels::kOneDnn;
}

#if GPURUN_HAVE_ONEDNN
bool on_direct(const Conv2dDesc& d) {
  return on_onednn() && direct::applies(d);
}
#endif

// Rows of the column matrix: one per (c, p, q); columns: one per output pixel.
std::size_t col_rows(const Conv2dDesc& d) {
  return std::size_t(d.in_c) * d.k_h * d.k_w;
}
std::size_t col_cols(const Conv2dDesc& d) {
  return std::size_t(d.out_h()) * d.out_w();
}

void check_workspace(const Conv2dDesc& d, const Workspace& ws) {
  if (ws.data == nullptr || ws.floats < conv2d_workspace_floats(d)) {
    throw std::invalid_argument("conv2d: workspace of " + std::to_string(ws.floats) +
                                " floats, need " + std::to_string(conv2d_workspace_floats(d)));
  }
}

void im2col(const Conv2dDesc& d, const float* x, float* cols) {
  const int oh = d.out_h(), ow = d.out_w();
  for (int c = 0; c < d.in_c; ++c)
    for (int p = 0; p < d.k_h; ++p)
      for (int q = 0; q < d.k_w; ++q) {
        float* row = cols + ((std::size_t(c) * d.k_h + p) * d.k_w + q) * oh * ow;
        const float* xc = x + std::size_t(c) * d.in_h * d.in_w;
        for (int i = 0; i < oh; ++i) {
          const int r = i * d.stride - d.pad + p;
          float* out = row + std::size_t(i) * ow;
          if (r < 0 || r >= d.in_h) {
            std::memset(out, 0, sizeof(float) * ow);
            continue;
          }
          const float* xr = xc + std::size_t(r) * d.in_w;
          if (d.stride == 1 && d.pad == 0) {
            std::memcpy(out, xr + q, sizeof(float) * ow);  // the common case: a plain row copy
            continue;
          }
          for (int j = 0; j < ow; ++j) {
            const int t = j * d.stride - d.pad + q;
            out[j] = (t < 0 || t >= d.in_w) ? 0.0f : xr[t];
          }
        }
      }
}

void col2im_add(const Conv2dDesc& d, const float* cols, float* x) {
  const int oh = d.out_h(), ow = d.out_w();
  for (int c = 0; c < d.in_c; ++c)
    for (int p = 0; p < d.k_h; ++p)
      for (int q = 0; q < d.k_w; ++q) {
        const float* row = cols + ((std::size_t(c) * d.k_h + p) * d.k_w + q) * oh * ow;
        float* xc = x + std::size_t(c) * d.in_h * d.in_w;
        for (int i = 0; i < oh; ++i) {
          const int r = i * d.stride - d.pad + p;
          if (r < 0 || r >= d.in_h) continue;
          float* xr = xc + std::size_t(r) * d.in_w;
          const float* in = row + std::size_t(i) * ow;
          for (int j = 0; j < ow; ++j) {
            const int t = j * d.stride - d.pad + q;
            if (t >= 0 && t < d.in_w) xr[t] += in[j];
          }
        }
      }
}

// The workspace: im2col's columns (or the direct kernels' scratch), then one dw for kAdd.
std::size_t columns_floats(const Conv2dDesc& d) {
#if GPURUN_HAVE_ONEDNN
  return std::max(col_rows(d) * col_cols(d), direct::scratch_floats(d));
#else
  return col_rows(d) * col_cols(d);
#endif
}

}  // namespace

std::size_t conv2d_workspace_floats(const Conv2dDesc& d) {
  return columns_floats(d) + d.w_floats();
}

void conv2d_forward(const Conv2dDesc& d, const float* x, const float* w, float* y, Workspace ws) {
  validate(d);
  check_workspace(d, ws);
#if GPURUN_HAVE_ONEDNN
  if (on_direct(d)) return direct::forward(d, Activation::kNone, x, w, nullptr, y);
  if (on_onednn()) return onednn::conv_forward(d, Activation::kNone, x, w, nullptr, y);
#endif
  const int K = int(col_rows(d)), P = int(col_cols(d));
  const std::size_t xs = std::size_t(d.in_c) * d.in_h * d.in_w, ys = std::size_t(d.out_c) * P;
  for (int n = 0; n < d.batch; ++n) {
    im2col(d, x + n * xs, ws.data);
    // y_n [out_c, P] = w [out_c, K] * cols [K, P]
    sgemm(Trans::kNo, Trans::kNo, d.out_c, P, K, 1.0f, w, K, ws.data, P, 0.0f, y + n * ys, P);
  }
}

void conv2d_backward_weights(const Conv2dDesc& d, const float* x, const float* dy, float* dw,
                             Workspace ws, Accumulate acc) {
  validate(d);
  check_workspace(d, ws);
#if GPURUN_HAVE_ONEDNN
  if (on_direct(d))  // it forms the batch's sum and adds it for kAdd itself
    return direct::backward(d, Activation::kNone, x, nullptr, dy, dw, nullptr, acc, ws.data);
#endif
  const int K = int(col_rows(d)), P = int(col_cols(d));
  const std::size_t xs = std::size_t(d.in_c) * d.in_h * d.in_w, ys = std::size_t(d.out_c) * P;
  // With kAdd the batch's sum goes to the workspace tail first and is added once at the end.
  float* sum = acc == Accumulate::kAdd ? ws.data + columns_floats(d) : dw;
#if GPURUN_HAVE_ONEDNN
  if (on_onednn()) onednn::conv_backward_weights(d, x, dy, sum);
#endif
  for (int n = 0; n < d.batch && !on_onednn(); ++n) {
    im2col(d, x + n * xs, ws.data);
    // sum [out_c, K] += dy_n [out_c, P] * cols^T [P, K]
    sgemm(Trans::kNo, Trans::kYes, d.out_c, K, P, 1.0f, dy + n * ys, P, ws.data, P,
          n == 0 ? 0.0f : 1.0f, sum, K);
  }
  if (acc == Accumulate::kAdd) {
    for (std::size_t i = 0; i < d.w_floats(); ++i) dw[i] += sum[i];
  }
}

void conv2d_backward_data(const Conv2dDesc& d, const float* w, const float* dy, float* dx,
                          Workspace ws) {
  validate(d);
  check_workspace(d, ws);
  const int K = int(col_rows(d)), P = int(col_cols(d));
  const std::size_t xs = std::size_t(d.in_c) * d.in_h * d.in_w, ys = std::size_t(d.out_c) * P;
#if GPURUN_HAVE_ONEDNN
  if (on_onednn()) return onednn::conv_backward_data(d, w, dy, dx);
#endif
  std::memset(dx, 0, sizeof(float) * d.x_floats());
  for (int n = 0; n < d.batch; ++n) {
    // cols [K, P] = w^T [K, out_c] * dy_n [out_c, P], then scattered back onto the image
    sgemm(Trans::kYes, Trans::kNo, K, P, d.out_c, 1.0f, w, K, dy + n * ys, P, 0.0f, ws.data, P);
    col2im_add(d, ws.data, dx + n * xs);
  }
}

void conv2d_bias_act_forward(const Conv2dDesc& d, Activation act, const float* x, const float* w,
                             const float* b, float* y, Workspace ws) {
#if GPURUN_HAVE_ONEDNN
  if (on_direct(d)) {
    validate(d);
    return direct::forward(d, act, x, w, b, y);
  }
  if (on_onednn()) {
    validate(d);
    return onednn::conv_forward(d, act, x, w, b, y);
  }
#endif
  conv2d_forward(d, x, w, y, ws);
  bias_act_forward({d.batch, d.out_c, d.out_h() * d.out_w(), act}, y, b);
}

void conv2d_bias_act_backward_weights(const Conv2dDesc& d, Activation act, const float* x,
                                      const float* y, float* dy, float* dw, float* db, Workspace ws,
                                      Accumulate acc) {
#if GPURUN_HAVE_ONEDNN
  if (on_direct(d)) {
    validate(d);
    check_workspace(d, ws);
    return direct::backward(d, act, x, y, dy, dw, db, acc, ws.data);
  }
#endif
  bias_act_backward({d.batch, d.out_c, d.out_h() * d.out_w(), act}, y, dy, db, acc);
  conv2d_backward_weights(d, x, dy, dw, ws, acc);
}

bool conv2d_channels_independent(const Conv2dDesc& d) {
#if GPURUN_HAVE_ONEDNN
  return on_direct(d);
#else
  (void)d;
  return false;
#endif
}

}  // namespace gpurun::kernels::cpu

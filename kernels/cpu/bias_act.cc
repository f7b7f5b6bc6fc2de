// bias_act.cc: bias + ReLU forward (in place) and backward (mask dy, sum db). The cpu:: version is
// written so the inner loop over `inner` contiguous floats vectorises; ref:: is the obvious loop
// with a double accumulator.
#include "gpurun/kernels/bias_act.h"

#include "simd.h"

namespace gpurun::kernels {

namespace ref {
void bias_act_forward(const BiasActDesc& d, float* y, const float* b) {
  validate(d);
  for (int n = 0; n < d.outer; ++n)
    for (int c = 0; c < d.channels; ++c)
      for (int i = 0; i < d.inner; ++i) {
        float& v = y[(std::size_t(n) * d.channels + c) * d.inner + i];
        if (b) v += b[c];
        if (d.act == Activation::kRelu && !(v > 0.0f)) v = 0.0f;
      }
}

void bias_act_backward(const BiasActDesc& d, const float* y, float* dy, float* db, Accumulate acc) {
  validate(d);
  for (int c = 0; c < d.channels; ++c) {
    double s = 0;
    for (int n = 0; n < d.outer; ++n)
      for (int i = 0; i < d.inner; ++i) {
        const std::size_t k = (std::size_t(n) * d.channels + c) * d.inner + i;
        if (d.act == Activation::kRelu && !(y[k] > 0.0f)) dy[k] = 0.0f;
        s += dy[k];
      }
    if (db) db[c] = acc == Accumulate::kAdd ? db[c] + float(s) : float(s);
  }
}
}  // namespace ref

namespace cpu {
namespace {
GPURUN_SIMD_CLONES void add_bias_row(float* v, float b, int n, bool relu) {
  if (relu && b == 0.0f) {  // no bias (a ReLU layer), or a zero one: adding it changes nothing
    for (int i = 0; i < n; ++i) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
  } else if (relu) {
    for (int i = 0; i < n; ++i) {
      const float t = v[i] + b;
      v[i] = t > 0.0f ? t : 0.0f;
    }
  } else {
    for (int i = 0; i < n; ++i) v[i] += b;
  }
}
}  // namespace

void bias_act_forward(const BiasActDesc& d, float* y, const float* b) {
  validate(d);
  const bool relu = d.act == Activation::kRelu;
  if (!b && !relu) return;
  for (int n = 0; n < d.outer; ++n)
    for (int c = 0; c < d.channels; ++c)
      add_bias_row(y + (std::size_t(n) * d.channels + c) * d.inner, b ? b[c] : 0.0f, d.inner, relu);
}

namespace {
// Masks one row of `inner` gradients by the ReLU and returns their sum. Independent partial sums
// let the compiler vectorise the reduction without -ffast-math.
GPURUN_SIMD_CLONES float mask_and_sum(const float* yv, float* g, int inner, bool relu) {
  constexpr int kLanes = 16;
  float part[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= inner; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = (!relu || yv[i + l] > 0.0f) ? g[i + l] : 0.0f;
      g[i + l] = v;
      part[l] += v;
    }
  float s = 0.0f;
  for (; i < inner; ++i) {
    const float v = (!relu || yv[i] > 0.0f) ? g[i] : 0.0f;
    g[i] = v;
    s += v;
  }
  for (int l = 0; l < kLanes; ++l) s += part[l];
  return s;
}
}  // namespace

void bias_act_backward(const BiasActDesc& d, const float* y, float* dy, float* db, Accumulate acc) {
  validate(d);
  const bool relu = d.act == Activation::kRelu;
  // Channel-outer so each channel's batch sum is complete before it touches db (see bias_act.h).
  for (int c = 0; c < d.channels; ++c) {
    float s = 0.0f;
    for (int n = 0; n < d.outer; ++n) {
      const std::size_t off = (std::size_t(n) * d.channels + c) * d.inner;
      s += mask_and_sum(y + off, dy + off, d.inner, relu);
    }
    if (db) db[c] = acc == Accumulate::kAdd ? db[c] + s : s;
  }
}
}  // namespace cpu

}  // namespace gpurun::kernels

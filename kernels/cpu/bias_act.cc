// bias_act.cc: bias + ReLU forward (in place) and backward (mask dy, sum db). The cpu:: version is
// written so the inner loop over `inner` contiguous floats vectorises; ref:: is the obvious loop.
#include "gpurun/kernels/bias_act.h"

#include <cstring>

namespace gpurun::kernels {

namespace ref {
void bias_act_forward(const BiasActDesc& d, float* y, const float* b) {
  validate(d);
  for (int n = 0; n < d.outer; ++n)
    for (int c = 0; c < d.channels; ++c)
      for (int i = 0; i < d.inner; ++i) {
        float& v = y[(std::size_t(n) * d.channels + c) * d.inner + i];
        v += b[c];
        if (d.act == Activation::kRelu && !(v > 0.0f)) v = 0.0f;
      }
}

void bias_act_backward(const BiasActDesc& d, const float* y, float* dy, float* db) {
  validate(d);
  if (db) std::memset(db, 0, sizeof(float) * d.channels);
  for (int n = 0; n < d.outer; ++n)
    for (int c = 0; c < d.channels; ++c)
      for (int i = 0; i < d.inner; ++i) {
        const std::size_t k = (std::size_t(n) * d.channels + c) * d.inner + i;
        if (d.act == Activation::kRelu && !(y[k] > 0.0f)) dy[k] = 0.0f;
        if (db) db[c] += dy[k];
      }
}
}  // namespace ref

namespace cpu {
void bias_act_forward(const BiasActDesc& d, float* y, const float* b) {
  validate(d);
  const bool relu = d.act == Activation::kRelu;
  for (int n = 0; n < d.outer; ++n)
    for (int c = 0; c < d.channels; ++c) {
      float* v = y + (std::size_t(n) * d.channels + c) * d.inner;
      const float bc = b[c];
      if (relu) {
        for (int i = 0; i < d.inner; ++i) {
          const float t = v[i] + bc;
          v[i] = t > 0.0f ? t : 0.0f;
        }
      } else {
        for (int i = 0; i < d.inner; ++i) v[i] += bc;
      }
    }
}

void bias_act_backward(const BiasActDesc& d, const float* y, float* dy, float* db) {
  validate(d);
  const bool relu = d.act == Activation::kRelu;
  if (db) std::memset(db, 0, sizeof(float) * d.channels);
  for (int n = 0; n < d.outer; ++n)
    for (int c = 0; c < d.channels; ++c) {
      const std::size_t off = (std::size_t(n) * d.channels + c) * d.inner;
      const float* yv = y + off;
      float* g = dy + off;
      float s = 0.0f;
      if (relu) {
        for (int i = 0; i < d.inner; ++i) {
          g[i] = yv[i] > 0.0f ? g[i] : 0.0f;
          s += g[i];
        }
      } else {
        for (int i = 0; i < d.inner; ++i) s += g[i];
      }
      if (db) db[c] += s;
    }
}
}  // namespace cpu

}  // namespace gpurun::kernels

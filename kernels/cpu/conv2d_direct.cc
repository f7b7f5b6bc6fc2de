// conv2d_direct.cc: see conv2d_direct.h. Both ops walk each output row in 16-column chunks; when
// the row is not a multiple of 16 wide, its last chunk ends at the row's end and overlaps the one
// before (the forward writes those columns twice with the same values, the backward counts them
// once). Each chunk loads the K = k*k shifted input vectors it needs once: the forward uses
// them for every output channel, the backward for the K partial sums of two channels.
#include "conv2d_direct.h"

#include <algorithm>
#include <cstring>

#include "simd.h"

namespace gpurun::kernels::cpu::direct {
namespace {

constexpr int kLanes = 16;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int Mask __attribute__((vector_size(kLanes * sizeof(int))));

// Unaligned vector loads and stores; macros, not functions, so each clone inlines its own.
#define GPURUN_LOAD(p)                  \
  ({                                    \
    Vec v_;                             \
    std::memcpy(&v_, (p), sizeof(Vec)); \
    v_;                                 \
  })
#define GPURUN_STORE(p, v)              \
  do {                                  \
    const Vec s_ = (v);                 \
    std::memcpy((p), &s_, sizeof(Vec)); \
  } while (0)

// The next chunk's first column after the one at j0, or -1 after the row's last chunk.
int next_chunk(int j0, int width) {
  return j0 + kLanes >= width ? -1 : std::min(j0 + kLanes, width - kLanes);
}

template <int KS>
GPURUN_SIMD_CLONES void forward_k(const Conv2dDesc& d, bool relu, const float* x, const float* w,
                                  const float* b, float* y) {
  constexpr int K = KS * KS;
  const int oh = d.out_h(), ow = d.out_w(), iw = d.in_w;
  const std::size_t x_image = std::size_t(d.in_h) * iw, y_plane = std::size_t(oh) * ow;
  for (int n = 0; n < d.batch; ++n) {
    const float* xn = x + n * x_image;
    float* yn = y + n * d.out_c * y_plane;
    for (int i = 0; i < oh; ++i)
      for (int j0 = 0; j0 >= 0; j0 = next_chunk(j0, ow)) {
        Vec in[K];
#pragma GCC unroll 32
        for (int k = 0; k < K; ++k) in[k] = GPURUN_LOAD(xn + (i + k / KS) * iw + j0 + k % KS);
        for (int o = 0; o < d.out_c; ++o) {
          const float* wo = w + o * K;
          Vec acc = Vec{} + (b ? b[o] : 0.0f);
#pragma GCC unroll 32
          for (int k = 0; k < K; ++k) acc += wo[k] * in[k];
          if (relu) acc = (Vec)((Mask)acc & (acc > 0.0f));  // bitwise: see GPURUN_CHUNK_GRAD
          GPURUN_STORE(yn + o * y_plane + i * ow + j0, acc);
        }
      }
  }
}

// The gradient one chunk of an output channel contributes: dy, zero where the ReLU was off
// (y <= 0) and in the lanes the row's previous chunk counted (fresh: all ones in the others).
// Bitwise masks, not ?:, which GCC may lower lane by lane.
#define GPURUN_CHUNK_GRAD(offset)                  \
  ({                                               \
    Mask m_ = fresh;                               \
    if (y) m_ &= GPURUN_LOAD(y + (offset)) > 0.0f; \
    (Vec)(m_ & (Mask)GPURUN_LOAD(dy + (offset)));  \
  })

// part holds, per output channel, K vectors of partial sums for dw and one for db, carried
// across the batch; OB output channels at a time share each input vector load (OB divides
// out_c). y == nullptr: no activation.
template <int KS, int OB>
GPURUN_SIMD_CLONES void backward_k(const Conv2dDesc& d, const float* x, const float* y,
                                   const float* dy, float* part) {
  constexpr int K = KS * KS, P = K + 1;
  const int oh = d.out_h(), ow = d.out_w(), iw = d.in_w;
  const std::size_t x_image = std::size_t(d.in_h) * iw, y_plane = std::size_t(oh) * ow;
  Mask lane;
  for (int l = 0; l < kLanes; ++l) lane[l] = l;
  std::memset(part, 0, sizeof(Vec) * P * d.out_c);
  for (int n = 0; n < d.batch; ++n) {
    const float* xn = x + n * x_image;
    for (int o0 = 0; o0 < d.out_c; o0 += OB) {
      const std::size_t plane = (std::size_t(n) * d.out_c + o0) * y_plane;
      float* po = part + std::size_t(o0) * P * kLanes;
      Vec acc[OB][K], bias[OB];
#pragma GCC unroll 4
      for (int b = 0; b < OB; ++b) {
#pragma GCC unroll 32
        for (int k = 0; k < K; ++k) acc[b][k] = GPURUN_LOAD(po + (b * P + k) * kLanes);
        bias[b] = GPURUN_LOAD(po + (b * P + K) * kLanes);
      }
      for (int i = 0; i < oh; ++i)
        for (int j0 = 0, done = 0; j0 >= 0; done = j0 + kLanes, j0 = next_chunk(j0, ow)) {
          const Mask fresh = lane >= done - j0;
          Vec g[OB];
#pragma GCC unroll 4
          for (int b = 0; b < OB; ++b) {
            g[b] = GPURUN_CHUNK_GRAD(plane + b * y_plane + i * ow + j0);
            bias[b] += g[b];
          }
#pragma GCC unroll 32
          for (int k = 0; k < K; ++k) {
            const Vec in = GPURUN_LOAD(xn + (i + k / KS) * iw + j0 + k % KS);
#pragma GCC unroll 4
            for (int b = 0; b < OB; ++b) acc[b][k] += g[b] * in;
          }
        }
#pragma GCC unroll 4
      for (int b = 0; b < OB; ++b) {
#pragma GCC unroll 32
        for (int k = 0; k < K; ++k) GPURUN_STORE(po + (b * P + k) * kLanes, acc[b][k]);
        GPURUN_STORE(po + (b * P + K) * kLanes, bias[b]);
      }
    }
  }
}

#undef GPURUN_CHUNK_GRAD
#undef GPURUN_LOAD
#undef GPURUN_STORE

}  // namespace

bool applies(const Conv2dDesc& d) {
  return d.in_c == 1 && d.stride == 1 && d.pad == 0 && d.k_h == d.k_w &&
         (d.k_h == 3 || d.k_h == 5) && d.out_w() >= kLanes;
}

void forward(const Conv2dDesc& d, Activation act, const float* x, const float* w, const float* b,
             float* y) {
  const bool relu = act == Activation::kRelu;
  if (d.k_h == 3) return forward_k<3>(d, relu, x, w, b, y);
  forward_k<5>(d, relu, x, w, b, y);
}

std::size_t scratch_floats(const Conv2dDesc& d) {
  return std::size_t(d.out_c) * (d.k_h * d.k_w + 1) * kLanes;
}

void backward(const Conv2dDesc& d, Activation act, const float* x, const float* y, const float* dy,
              float* dw, float* db, Accumulate acc, float* scratch) {
  const float* mask = act == Activation::kRelu ? y : nullptr;
  if (d.k_h == 3 && d.out_c % 2 == 0)
    backward_k<3, 2>(d, x, mask, dy, scratch);
  else if (d.k_h == 3)
    backward_k<3, 1>(d, x, mask, dy, scratch);
  else
    backward_k<5, 1>(d, x, mask, dy, scratch);
  // Each sum over its 16 lanes, in lane order, then added to what is there for kAdd.
  const int P = d.k_h * d.k_w + 1;
  for (int o = 0; o < d.out_c; ++o)
    for (int k = 0; k < P; ++k) {
      float s = 0.0f;
      for (int l = 0; l < kLanes; ++l) s += scratch[(std::size_t(o) * P + k) * kLanes + l];
      float* out = k < P - 1 ? dw + o * (P - 1) + k : db ? db + o : nullptr;
      if (out) *out = acc == Accumulate::kAdd ? *out + s : s;
    }
}

}  // namespace gpurun::kernels::cpu::direct

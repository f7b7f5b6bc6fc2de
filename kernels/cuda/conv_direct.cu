// conv_direct.cu: cuda:: direct kernels for convolutions with small filters (conv2d.h,
// conv2d_direct): a network's first layer, y = act(conv(x, w) + b) forward and its backward to
// the weights and the bias. On an H200 cuDNN spent 86 us (TF32) to 490 us (FP32, its
// deterministic algorithm) a step of batch 256 on the MNIST CNN's 1x3x3x32 backward-filter: a
// reduction over every output position that its kernels spread over a few dozen blocks. Here:
//   forward   one thread per output position: its patch (in_c x k_h x k_w <= kMaxTaps values) in
//             registers, every output channel written (coalesced along the row), the filters
//             read as warp-uniform loads, bias and activation fused;
//   backward  stage 1: a block per chunk of consecutive positions (64 to 512, for about a
//             thousand blocks: batch 64 had 85 blocks of 512 for an H200's 132 SMs), a warp
//             per group of up to 4 output channels in turn, each lane summing g * patch and g
//             (g = dy masked by act'(y)) over its positions, one patch load serving the group;
//             the warp's 32 lanes then meet in shared memory and lane t sums value t over
//             them in lane order: one partial per block in the workspace;
//             stage 2: a warp per weight (and bias) sums the blocks' partials in a fixed order.
// No atomics: the sums' order depends on the shape only, so a run repeats bit for bit (on any
// GPU). The taps' offsets travel in the launch's parameters, so neither kernel waits at a block
// barrier. Tested against the reference by tests/kernels/cuda (ctest -L gpu).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "gpurun/cuda_support/check.cuh"
#include "context.cuh"
#include "gpurun/kernels/conv2d.h"

namespace gpurun::kernels::cuda {
namespace {

constexpr int kMaxTaps = 32;      // in_c * k_h * k_w of a direct shape
constexpr int kMaxOutC = 256;     // output channels of a direct shape (wider layers: cuDNN)
constexpr int kThreads = 256;     // both stages' block
constexpr int kWarps = kThreads / 32;
constexpr int kMinChunk = 64, kMaxChunk = 512;  // positions per stage-1 block (a multiple of 32)
constexpr int kStage1Blocks = 1024;               // what the chunk aims at

// What the kernels need of a Conv2dDesc, with each tap's channel and offsets in (c, kh, kw)
// order (taps beyond the shape's: 0, masked by t < taps).
struct Shape {
  int batch, in_c, in_h, in_w, out_c, out_h, out_w, stride, pad, taps, chunk;
  unsigned char tap_c[kMaxTaps], tap_h[kMaxTaps], tap_w[kMaxTaps];
  __host__ __device__ int positions() const { return batch * out_h * out_w; }
};

Shape shape_of(const Conv2dDesc& d) {
  Shape s{d.batch, d.in_c, d.in_h, d.in_w, d.out_c, d.out_h(), d.out_w(),
          d.stride, d.pad, d.in_c * d.k_h * d.k_w, 0, {}, {}, {}};
  const std::size_t aim = (std::size_t(s.positions()) / kStage1Blocks + 31) / 32 * 32;
  s.chunk = int(std::clamp<std::size_t>(aim, kMinChunk, kMaxChunk));
  const int kk = d.k_h * d.k_w;
  for (int t = 0; t < s.taps; ++t) {
    s.tap_c[t] = static_cast<unsigned char>(t / kk);
    s.tap_h[t] = static_cast<unsigned char>(t % kk / d.k_w);
    s.tap_w[t] = static_cast<unsigned char>(t % d.k_w);
  }
  return s;
}

// The patch of position (n, oh, ow) for taps t < MaxTaps: zero outside the image (Padded only:
// without padding every tap of an output position is inside) and beyond the shape's taps.
template <int MaxTaps, bool Padded>
__device__ __forceinline__ void load_patch(const float* __restrict__ x, const Shape& s, int n,
                                           int oh, int ow, float (&v)[MaxTaps]) {
  const float* img = x + std::size_t(n) * s.in_c * s.in_h * s.in_w;
  const int h0 = oh * s.stride - s.pad, w0 = ow * s.stride - s.pad;
  GPURUN_UNROLL
  for (int t = 0; t < MaxTaps; ++t) {
    const int ih = h0 + s.tap_h[t], iw = w0 + s.tap_w[t];
    bool in = t < s.taps;
    if (Padded) in = in && ih >= 0 && ih < s.in_h && iw >= 0 && iw < s.in_w;
    v[t] = in ? img[(s.tap_c[t] * s.in_h + ih) * s.in_w + iw] : 0.0f;
  }
}

// Output channels a warp of stage 1 sums at once (sharing each patch it loads), as many as keep
// its accumulators in registers.
template <int MaxTaps>
constexpr int kGroup = MaxTaps <= 9 ? 4 : MaxTaps <= 16 ? 2 : 1;

template <int MaxTaps, bool Padded>
__global__ void GPURUN_KERNEL_BOUNDS(kThreads)
    conv_direct_fwd_kernel(const float* __restrict__ x, const float* __restrict__ w,
                           const float* __restrict__ b, float* __restrict__ y, Shape s,
                           bool relu) {
  const int plane = s.out_h * s.out_w;
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < s.positions();
       p += gridDim.x * blockDim.x) {
    const int n = p / plane, r = p % plane;
    float v[MaxTaps];
    load_patch<MaxTaps, Padded>(x, s, n, r / s.out_w, r % s.out_w, v);
    float* out = y + std::size_t(n) * s.out_c * plane + r;
    for (int o = 0; o < s.out_c; ++o) {
      const float* wo = w + o * s.taps;
      float acc = 0.0f;
      GPURUN_UNROLL
      for (int t = 0; t < MaxTaps; ++t) acc = fmaf(t < s.taps ? wo[t] : 0.0f, v[t], acc);
      if (b) acc += b[o];
      out[std::size_t(o) * plane] = relu ? (acc > 0.0f ? acc : 0.0f) : acc;
    }
  }
}

// Stage 1: partial[block][o][t] (t < taps: the weight's sum; t == taps: the bias's). A warp takes
// kGroup channels at a time; its lanes step through the block's positions 32 apart, carrying
// (n, oh, ow) along instead of dividing.
template <int MaxTaps, bool Padded>
__global__ void GPURUN_KERNEL_BOUNDS(kThreads)
    conv_direct_bwd_partial_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                   const float* __restrict__ dy, float* __restrict__ partial,
                                   Shape s, bool relu) {
  constexpr int G = kGroup<MaxTaps>;
  // A lane's values (the weights', then the bias's) at an odd stride: no bank conflicts.
  __shared__ float lanes[kWarps][32][(MaxTaps + 1) | 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, plane = s.out_h * s.out_w;
  const int first = int(blockIdx.x) * s.chunk, p0 = first + lane;
  const int p1 = min(first + s.chunk, s.positions());
  for (int o0 = warp * G; o0 < s.out_c; o0 += kWarps * G) {
    float acc[G][MaxTaps], bias[G];
    GPURUN_UNROLL
    for (int c = 0; c < G; ++c) {
      bias[c] = 0.0f;
      GPURUN_UNROLL
      for (int t = 0; t < MaxTaps; ++t) acc[c][t] = 0.0f;
    }
    int n = p0 / plane, oh = p0 % plane / s.out_w, ow = p0 % s.out_w;
    for (int p = p0; p < p1; p += 32) {
      float v[MaxTaps];
      load_patch<MaxTaps, Padded>(x, s, n, oh, ow, v);
      const std::size_t k0 = (std::size_t(n) * s.out_c + o0) * plane + oh * s.out_w + ow;
      GPURUN_UNROLL
      for (int c = 0; c < G; ++c) {
        if (o0 + c >= s.out_c) break;  // the same for the whole warp
        const std::size_t k = k0 + std::size_t(c) * plane;
        float g = dy[k];
        if (relu && !(y[k] > 0.0f)) g = 0.0f;
        bias[c] += g;
        GPURUN_UNROLL
        for (int t = 0; t < MaxTaps; ++t) acc[c][t] = fmaf(g, v[t], acc[c][t]);
      }
      for (ow += 32; ow >= s.out_w;) {  // the position 32 further on
        ow -= s.out_w;
        if (++oh == s.out_h) oh = 0, ++n;
      }
    }
    GPURUN_UNROLL
    for (int c = 0; c < G; ++c) {
      if (o0 + c >= s.out_c) break;
      GPURUN_UNROLL
      for (int t = 0; t < MaxTaps; ++t) lanes[warp][lane][t] = acc[c][t];
      lanes[warp][lane][MaxTaps] = bias[c];
      __syncwarp(0xffffffffu);
      float* out = partial + (std::size_t(blockIdx.x) * s.out_c + o0 + c) * (s.taps + 1);
      for (int t = lane; t <= s.taps; t += 32) {
        const int from = t < s.taps ? t : MaxTaps;  // the bias after the weights
        float sum = 0.0f;
        for (int l = 0; l < 32; ++l) sum += lanes[warp][l][from];
        out[t] = sum;
      }
      __syncwarp(0xffffffffu);  // the buffer is the next channel's
    }
  }
}

// Stage 2: a warp per value j of [o][taps + 1], summing the blocks' partials in a fixed order.
__global__ void GPURUN_KERNEL_BOUNDS(kThreads)
    conv_direct_bwd_final_kernel(const float* __restrict__ partial, int blocks, int out_c,
                                 int taps, float* __restrict__ dw, float* __restrict__ db,
                                 bool add) {
  const int j = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per = taps + 1;
  if (j >= out_c * per) return;  // whole warps leave together
  float s = 0.0f;
  for (int blk = lane; blk < blocks; blk += 32) s += partial[std::size_t(blk) * out_c * per + j];
  for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane != 0) return;
  const int o = j / per, t = j % per;
  float* dst = t < taps ? dw + o * taps + t : db ? db + o : nullptr;
  if (dst) *dst = add ? *dst + s : s;  // the batch's sum first, then added (conv2d.h)
}

int stage1_blocks(const Shape& s) {
  return (s.positions() + s.chunk - 1) / s.chunk;
}

// Floats of stage 1's partials: [block][o][taps + 1].
std::size_t partial_floats(const Shape& s) {
  return std::size_t(stage1_blocks(s)) * s.out_c * (s.taps + 1);
}

// The smallest instantiation that holds the shape's taps, with or without padding: f(MaxTaps,
// Padded) as integral constants.
template <typename F>
void with_shape(const Shape& s, F&& f) {
  auto taps = [&](auto padded) {
    if (s.taps <= 9) return f(std::integral_constant<int, 9>{}, padded);
    if (s.taps <= 16) return f(std::integral_constant<int, 16>{}, padded);
    if (s.taps <= 25) return f(std::integral_constant<int, 25>{}, padded);
    f(std::integral_constant<int, kMaxTaps>{}, padded);
  };
  if (s.pad > 0) return taps(std::true_type{});
  taps(std::false_type{});
}

}  // namespace

bool conv2d_direct(const Conv2dDesc& d) {
  validate(d);
  const std::size_t positions = std::size_t(d.batch) * d.out_h() * d.out_w();
  const std::size_t image = std::size_t(d.in_c) * d.in_h * d.in_w;  // indexed in int
  // Positions are counted in int, and the forward's grid-stride loop steps up to 2^21 past them.
  return std::size_t(d.in_c) * d.k_h * d.k_w <= kMaxTaps && d.out_c <= kMaxOutC &&
         positions < (std::size_t(1) << 31) - (std::size_t(1) << 21) &&
         image < (std::size_t(1) << 31);
}

// What stage 1 needs at this batch or any smaller one: the chunk follows the shape, so a smaller
// batch can take more blocks (at most 1,024 + 1,024/64 while the chunk is under its cap, the
// positions over 512 above it); a workspace sized for the training batch then serves them all.
std::size_t conv2d_direct_workspace_floats(const Conv2dDesc& d) {
  if (!conv2d_direct(d)) return 0;
  const Shape s = shape_of(d);
  const std::size_t capped = (std::size_t(s.positions()) + kMaxChunk - 1) / kMaxChunk;
  const std::size_t blocks = std::max<std::size_t>(2 * kStage1Blocks, capped);
  return std::max(partial_floats(s), blocks * s.out_c * (s.taps + 1));
}

void conv2d_bias_act_forward(const Conv2dDesc& d, Activation act, const float* x, const float* w,
                             const float* b, float* y, Workspace ws, Stream s) {
  const BiasActDesc ba{d.batch, d.out_c, d.out_h() * d.out_w(), act};
  if (!conv2d_direct(d)) {
    conv2d_forward(d, x, w, y, ws, s);
    if (b || act == Activation::kRelu) bias_act_forward(ba, y, b, s);
    return;
  }
  const Shape sh = shape_of(d);
  const bool relu = act == Activation::kRelu;
  const int grid = detail::grid_blocks(std::size_t(sh.positions()), kThreads);
  with_shape(sh, [&](auto taps, auto padded) {
    constexpr int kTaps = decltype(taps)::value;
    constexpr bool kPadded = decltype(padded)::value;
    const auto conv_direct_fwd = conv_direct_fwd_kernel<kTaps, kPadded>;
    GPURUN_LAUNCH(conv_direct_fwd, grid, kThreads, 0, detail::raw(s), x, w, b, y, sh, relu);
  });
}

void conv2d_bias_act_backward_weights(const Conv2dDesc& d, Activation act, const float* x,
                                      const float* y, float* dy, float* dw, float* db,
                                      Workspace ws, Accumulate acc, Stream s) {
  if (!conv2d_direct(d)) {
    bias_act_backward({d.batch, d.out_c, d.out_h() * d.out_w(), act}, y, dy, db, acc, s);
    conv2d_backward_weights(d, x, dy, dw, ws, acc, s);
    return;
  }
  const Shape sh = shape_of(d);
  const std::size_t need = partial_floats(sh);
  if (ws.data == nullptr || ws.floats < need)
    throw std::invalid_argument("conv2d_bias_act_backward_weights: workspace of " +
                                std::to_string(ws.floats) + " floats, the direct kernels need " +
                                std::to_string(need) + " (size it with conv2d_workspace_floats)");
  const bool relu = act == Activation::kRelu;
  const int blocks = stage1_blocks(sh);
  with_shape(sh, [&](auto taps, auto padded) {
    constexpr int kTaps = decltype(taps)::value;
    constexpr bool kPadded = decltype(padded)::value;
    const auto conv_direct_bwd_partial = conv_direct_bwd_partial_kernel<kTaps, kPadded>;
    GPURUN_LAUNCH(conv_direct_bwd_partial, blocks, kThreads, 0, detail::raw(s), x, y, dy,
                  ws.data, sh, relu);
  });
  const int values = sh.out_c * (sh.taps + 1);
  GPURUN_LAUNCH(conv_direct_bwd_final_kernel, (values + kWarps - 1) / kWarps, kThreads, 0,
                detail::raw(s), ws.data, blocks, sh.out_c, sh.taps, dw, db,
                acc == Accumulate::kAdd);
}

}  // namespace gpurun::kernels::cuda

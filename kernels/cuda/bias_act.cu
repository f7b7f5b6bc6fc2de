// bias_act.cu: cuda:: bias + activation, forward (in place) and backward (mask dy in place, sum
// db), for tensors viewed as [outer, channels, inner] (bias_act.h). The bias-gradient sums use a
// fixed reduction tree (no atomics), so db is bitwise reproducible run to run.
// Tested against the CPU twin by tests/kernels/cuda (ctest -L gpu).
#include "gpurun/cuda_support/check.cuh"
#include "context.cuh"
#include "gpurun/kernels/bias_act.h"

namespace gpurun::kernels::cuda {
namespace {

constexpr int kBlock = 256;  // the grid-stride kernels' block; also their GPURUN_KERNEL_BOUNDS

__device__ __forceinline__ float act_fwd(float v, bool relu) {
  return relu ? (v > 0.0f ? v : 0.0f) : v;  // !(v > 0) also maps NaN to 0, as the CPU twin does
}

// Index is unsigned 32-bit when the tensor allows: a 64-bit division per element costs several
// times the 32-bit one, and this kernel is otherwise a pure stream over memory.
template <typename Index>
__global__ void GPURUN_KERNEL_BOUNDS(kBlock)
    bias_act_fwd_kernel(float* __restrict__ y, const float* __restrict__ b, Index n, Index channels,
                        Index inner, bool relu) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x) {
    const Index c = (i / inner) % channels;
    y[i] = act_fwd(y[i] + b[c], relu);
  }
}

// No bias: y = max(y, 0).
__global__ void GPURUN_KERNEL_BOUNDS(kBlock) relu_fwd_kernel(float* __restrict__ y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    y[i] = act_fwd(y[i], true);
  }
}

// Only the mask: db == nullptr.
__global__ void GPURUN_KERNEL_BOUNDS(kBlock)
    act_bwd_kernel(const float* __restrict__ y, float* __restrict__ dy, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
}

// inner == 1 (dense layers): [outer, channels] row-major. A block owns 32 consecutive channels
// (threadIdx.x, coalesced reads along a row) and its 8 rows of threads (threadIdx.y) stride over
// the outer dimension; the partial sums meet in shared memory in a fixed order.
constexpr int kColTile = 32, kRowThreads = 8;
__global__ void GPURUN_KERNEL_BOUNDS(kColTile* kRowThreads)
    bias_act_bwd_rows_kernel(const float* __restrict__ y, float* __restrict__ dy,
                             float* __restrict__ db, int outer, int channels, bool relu, bool add) {
  __shared__ float part[kRowThreads][kColTile];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  float s = 0.0f;
  if (c < channels) {
    for (int n = threadIdx.y; n < outer; n += kRowThreads) {
      const std::size_t k = std::size_t(n) * channels + c;
      float g = dy[k];
      if (relu && !(y[k] > 0.0f)) {
        g = 0.0f;
        dy[k] = 0.0f;
      }
      s += g;
    }
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    float t = 0.0f;
    for (int r = 0; r < kRowThreads; ++r) t += part[r][threadIdx.x];
    db[c] = add ? db[c] + t : t;  // the batch's sum first, then added (bias_act.h)
  }
}

// inner > 1 (conv outputs): one block per channel; each warp takes whole rows (one image's
// `inner` contiguous floats of that channel, coalesced) so no index needs a division; then a
// fixed-order shared-memory tree. Memory bound: y and dy read, dy written once.
constexpr int kChanThreads = 1024, kChanWarps = kChanThreads / 32;
__global__ void GPURUN_KERNEL_BOUNDS(kChanThreads)
    bias_act_bwd_chan_kernel(const float* __restrict__ y, float* __restrict__ dy,
                             float* __restrict__ db, int outer, int channels, int inner, bool relu,
                             bool add) {
  __shared__ float part[kChanThreads];
  const int c = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float s = 0.0f;
  for (int n = warp; n < outer; n += kChanWarps) {
    const std::size_t row = (std::size_t(n) * channels + c) * std::size_t(inner);
    for (int i = lane; i < inner; i += 32) {
      float g = dy[row + i];
      if (relu && !(y[row + i] > 0.0f)) {
        g = 0.0f;
        dy[row + i] = 0.0f;
      }
      s += g;
    }
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = kChanThreads / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = add ? db[c] + part[0] : part[0];
}

}  // namespace

void bias_act_forward(const BiasActDesc& d, float* y, const float* b, Stream s) {
  validate(d);
  const std::size_t n = d.floats();
  const bool relu = d.act == Activation::kRelu;
  const int grid = detail::grid_blocks(n, kBlock);
  if (b == nullptr) {
    if (!relu) return;
    GPURUN_LAUNCH(relu_fwd_kernel, grid, kBlock, 0, detail::raw(s), y, n);
    return;
  }
  // 32-bit only when i + gridDim*blockDim cannot wrap.
  if (n + std::size_t(grid) * kBlock < (std::size_t(1) << 32)) {
    GPURUN_LAUNCH(bias_act_fwd_kernel<unsigned>, grid, kBlock, 0, detail::raw(s), y, b, unsigned(n),
                  unsigned(d.channels), unsigned(d.inner), relu);
  } else {
    GPURUN_LAUNCH(bias_act_fwd_kernel<std::size_t>, grid, kBlock, 0, detail::raw(s), y, b, n,
                  std::size_t(d.channels), std::size_t(d.inner), relu);
  }
}

void bias_act_backward(const BiasActDesc& d, const float* y, float* dy, float* db, Accumulate acc,
                       Stream s) {
  validate(d);
  const bool relu = d.act == Activation::kRelu;
  const bool add = acc == Accumulate::kAdd;
  if (db == nullptr) {
    if (!relu) return;  // identity activation, no bias gradient wanted: nothing to do
    const std::size_t n = d.floats();
    GPURUN_LAUNCH(act_bwd_kernel, detail::grid_blocks(n, kBlock), kBlock, 0, detail::raw(s), y, dy,
                  n);
    return;
  }
  if (d.inner == 1) {
    const dim3 block(kColTile, kRowThreads);
    const int grid = (d.channels + kColTile - 1) / kColTile;
    GPURUN_LAUNCH(bias_act_bwd_rows_kernel, grid, block, 0, detail::raw(s), y, dy, db, d.outer,
                  d.channels, relu, add);
  } else {
    GPURUN_LAUNCH(bias_act_bwd_chan_kernel, d.channels, kChanThreads, 0, detail::raw(s), y, dy, db,
                  d.outer, d.channels, d.inner, relu, add);
  }
}

}  // namespace gpurun::kernels::cuda

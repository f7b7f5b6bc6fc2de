// pool2d.cu: cuda:: max pooling (pool2d.h). Forward: a thread per output. Backward is a gather,
// a thread per input element adding the gradients of the windows whose first maximum it is, in
// the same (i, j) order as the CPU twin's scatter: no atomics, bitwise the CPU's sums, and
// overlapping windows (stride < size) need no special case.
// Tested against the CPU twin by tests/kernels/cuda (ctest -L gpu).
#include "gpurun/cuda_support/check.cuh"
#include "context.cuh"
#include "gpurun/kernels/pool2d.h"

namespace gpurun::kernels::cuda {
namespace {

constexpr int kBlock = 256;  // every kernel here; also its GPURUN_KERNEL_BOUNDS

struct Geometry {
  int in_h, in_w, out_h, out_w, size, stride;
};

// Inlined, the geometry by value: a call with a reference made ptxas put it in local memory
// (the build fails on local memory and spills).
__device__ __forceinline__ int argmax_in_window(Geometry g, const float* plane, int i, int j) {
  int best = i * g.stride * g.in_w + j * g.stride;
  for (int p = 0; p < g.size; ++p) {
    const int row = (i * g.stride + p) * g.in_w + j * g.stride;
    for (int q = 0; q < g.size; ++q) {
      if (plane[row + q] > plane[best]) best = row + q;
    }
  }
  return best;
}

__global__ void GPURUN_KERNEL_BOUNDS(kBlock)
    max_pool_fwd_kernel(Geometry g, std::size_t planes, const float* __restrict__ x,
                        float* __restrict__ y) {
  const std::size_t out_plane = std::size_t(g.out_h) * g.out_w;
  const std::size_t n = planes * out_plane;
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < n;
       k += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t nc = k / out_plane;
    const int ij = int(k % out_plane);
    const float* plane = x + nc * g.in_h * g.in_w;
    y[k] = plane[argmax_in_window(g, plane, ij / g.out_w, ij % g.out_w)];
  }
}

__global__ void GPURUN_KERNEL_BOUNDS(kBlock)
    max_pool_bwd_kernel(Geometry g, std::size_t planes, const float* __restrict__ x,
                        const float* __restrict__ dy, float* __restrict__ dx) {
  const std::size_t in_plane = std::size_t(g.in_h) * g.in_w;
  const std::size_t n = planes * in_plane;
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < n;
       k += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t nc = k / in_plane;
    const int at = int(k % in_plane), r = at / g.in_w, c = at % g.in_w;
    const float* plane = x + nc * in_plane;
    const float* grad = dy + nc * g.out_h * g.out_w;
    // Windows i cover rows [i*stride, i*stride + size): those with r inside.
    const int i_lo = max(0, (r - g.size + g.stride) / g.stride),
              i_hi = min(g.out_h - 1, r / g.stride);
    const int j_lo = max(0, (c - g.size + g.stride) / g.stride),
              j_hi = min(g.out_w - 1, c / g.stride);
    float s = 0.0f;
    for (int i = i_lo; i <= i_hi; ++i)
      for (int j = j_lo; j <= j_hi; ++j) {
        if (argmax_in_window(g, plane, i, j) == at) s += grad[i * g.out_w + j];
      }
    dx[k] = s;
  }
}

Geometry geometry(const Pool2dDesc& d) {
  return {d.in_h, d.in_w, d.out_h(), d.out_w(), d.size, d.stride};
}

}  // namespace

void max_pool2d_forward(const Pool2dDesc& d, const float* x, float* y, Stream s) {
  validate(d);
  const std::size_t planes = std::size_t(d.batch) * d.channels;
  GPURUN_LAUNCH(max_pool_fwd_kernel, detail::grid_blocks(d.y_floats(), kBlock), kBlock, 0,
                detail::raw(s), geometry(d), planes, x, y);
}

void max_pool2d_backward(const Pool2dDesc& d, const float* x, const float* dy, float* dx,
                         Stream s) {
  validate(d);
  const std::size_t planes = std::size_t(d.batch) * d.channels;
  GPURUN_LAUNCH(max_pool_bwd_kernel, detail::grid_blocks(d.x_floats(), kBlock), kBlock, 0,
                detail::raw(s), geometry(d), planes, x, dy, dx);
}

}  // namespace gpurun::kernels::cuda

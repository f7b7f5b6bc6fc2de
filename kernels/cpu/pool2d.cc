// pool2d.cc: max pooling forward and backward on the CPU (pool2d.h). ref:: walks every window
// naively; cpu:: is the same arithmetic (a max has no rounding) with the plane offsets hoisted.
// Backward scatters each output's gradient to its window's first maximum, in output order, so
// overlapping windows (stride < size) add in a fixed order.
#include "gpurun/kernels/pool2d.h"

#include <algorithm>
#include <cstring>

namespace gpurun::kernels {
namespace {

// Offset, within one channel plane, of the first maximum of the window at output (i, j).
int argmax_in_window(const Pool2dDesc& d, const float* plane, int i, int j) {
  int best = i * d.stride * d.in_w + j * d.stride;
  for (int p = 0; p < d.size; ++p) {
    const int row = (i * d.stride + p) * d.in_w + j * d.stride;
    for (int q = 0; q < d.size; ++q) {
      if (plane[row + q] > plane[best]) best = row + q;
    }
  }
  return best;
}

}  // namespace

namespace ref {
void max_pool2d_forward(const Pool2dDesc& d, const float* x, float* y) {
  validate(d);
  const int oh = d.out_h(), ow = d.out_w();
  for (std::size_t nc = 0; nc < std::size_t(d.batch) * d.channels; ++nc) {
    const float* plane = x + nc * d.in_h * d.in_w;
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        y[(nc * oh + i) * ow + j] = plane[argmax_in_window(d, plane, i, j)];
      }
  }
}

void max_pool2d_backward(const Pool2dDesc& d, const float* x, const float* dy, float* dx) {
  validate(d);
  const int oh = d.out_h(), ow = d.out_w();
  std::fill(dx, dx + d.x_floats(), 0.0f);
  for (std::size_t nc = 0; nc < std::size_t(d.batch) * d.channels; ++nc) {
    const std::size_t in_off = nc * d.in_h * d.in_w;
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        dx[in_off + argmax_in_window(d, x + in_off, i, j)] += dy[(nc * oh + i) * ow + j];
      }
  }
}
}  // namespace ref

namespace cpu {
void max_pool2d_forward(const Pool2dDesc& d, const float* x, float* y) {
  validate(d);
  const int oh = d.out_h(), ow = d.out_w();
  const std::size_t in_plane = std::size_t(d.in_h) * d.in_w, out_plane = std::size_t(oh) * ow;
  for (std::size_t nc = 0; nc < std::size_t(d.batch) * d.channels; ++nc) {
    const float* plane = x + nc * in_plane;
    float* out = y + nc * out_plane;
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        const float* w = plane + std::size_t(i) * d.stride * d.in_w + std::size_t(j) * d.stride;
        float m = w[0];
        for (int p = 0; p < d.size; ++p)
          for (int q = 0; q < d.size; ++q) m = w[p * d.in_w + q] > m ? w[p * d.in_w + q] : m;
        out[i * ow + j] = m;
      }
    }
  }
}

void max_pool2d_backward(const Pool2dDesc& d, const float* x, const float* dy, float* dx) {
  validate(d);
  const int oh = d.out_h(), ow = d.out_w();
  const std::size_t in_plane = std::size_t(d.in_h) * d.in_w, out_plane = std::size_t(oh) * ow;
  std::memset(dx, 0, d.x_floats() * sizeof(float));
  for (std::size_t nc = 0; nc < std::size_t(d.batch) * d.channels; ++nc) {
    const float* plane = x + nc * in_plane;
    float* grad = dx + nc * in_plane;
    const float* g = dy + nc * out_plane;
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) grad[argmax_in_window(d, plane, i, j)] += g[i * ow + j];
  }
}
}  // namespace cpu

}  // namespace gpurun::kernels

// conv2d_ref.cc: the plain-loop convolution, the oracle the im2col/sgemm path and the CUDA kernels
// are tested against. Accumulates in double so it is the more accurate side of every comparison.
#include <vector>

#include "gpurun/kernels/conv2d.h"

namespace gpurun::kernels::ref {

void conv2d_forward(const Conv2dDesc& d, const float* x, const float* w, float* y) {
  validate(d);
  const int oh = d.out_h(), ow = d.out_w();
  for (int n = 0; n < d.batch; ++n)
    for (int o = 0; o < d.out_c; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double s = 0;
          for (int c = 0; c < d.in_c; ++c)
            for (int p = 0; p < d.k_h; ++p)
              for (int q = 0; q < d.k_w; ++q) {
                const int r = i * d.stride - d.pad + p, t = j * d.stride - d.pad + q;
                if (r < 0 || r >= d.in_h || t < 0 || t >= d.in_w) continue;
                s += double(w[((o * d.in_c + c) * d.k_h + p) * d.k_w + q]) *
                     x[((std::size_t(n) * d.in_c + c) * d.in_h + r) * d.in_w + t];
              }
          y[((std::size_t(n) * d.out_c + o) * oh + i) * ow + j] = float(s);
        }
}

void conv2d_backward_weights(const Conv2dDesc& d, const float* x, const float* dy, float* dw,
                             Accumulate acc) {
  validate(d);
  const int oh = d.out_h(), ow = d.out_w();
  for (int o = 0; o < d.out_c; ++o)
    for (int c = 0; c < d.in_c; ++c)
      for (int p = 0; p < d.k_h; ++p)
        for (int q = 0; q < d.k_w; ++q) {
          double s = 0;
          for (int n = 0; n < d.batch; ++n)
            for (int i = 0; i < oh; ++i)
              for (int j = 0; j < ow; ++j) {
                const int r = i * d.stride - d.pad + p, t = j * d.stride - d.pad + q;
                if (r < 0 || r >= d.in_h || t < 0 || t >= d.in_w) continue;
                s += double(dy[((std::size_t(n) * d.out_c + o) * oh + i) * ow + j]) *
                     x[((std::size_t(n) * d.in_c + c) * d.in_h + r) * d.in_w + t];
              }
          float& out = dw[((o * d.in_c + c) * d.k_h + p) * d.k_w + q];
          out = acc == Accumulate::kAdd ? out + float(s) : float(s);
        }
}

void conv2d_backward_data(const Conv2dDesc& d, const float* w, const float* dy, float* dx) {
  validate(d);
  const int oh = d.out_h(), ow = d.out_w();
  std::vector<double> sum(d.x_floats(), 0.0);
  for (int n = 0; n < d.batch; ++n)
    for (int o = 0; o < d.out_c; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          const double g = dy[((std::size_t(n) * d.out_c + o) * oh + i) * ow + j];
          for (int c = 0; c < d.in_c; ++c)
            for (int p = 0; p < d.k_h; ++p)
              for (int q = 0; q < d.k_w; ++q) {
                const int r = i * d.stride - d.pad + p, t = j * d.stride - d.pad + q;
                if (r < 0 || r >= d.in_h || t < 0 || t >= d.in_w) continue;
                sum[((std::size_t(n) * d.in_c + c) * d.in_h + r) * d.in_w + t] +=
                    g * w[((o * d.in_c + c) * d.k_h + p) * d.k_w + q];
              }
        }
  for (std::size_t k = 0; k < sum.size(); ++k) dx[k] = float(sum[k]);
}

}  // namespace gpurun::kernels::ref

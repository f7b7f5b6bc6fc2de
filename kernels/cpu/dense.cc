// dense.cc: the fully connected layer: ref:: loops with double accumulation (the oracle) and cpu::
// as three sgemm calls on the chosen CPU library (gemm.h), which is where almost all of the
// MNIST CNN's time goes.
#include "gpurun/kernels/dense.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gemm.h"

namespace gpurun::kernels {
namespace {
// [lo, hi) must lie in [0, end): `what` names the dimension ("columns", "rows") in the error.
void check_range(const char* op, const DenseDesc& d, const char* what, int lo, int hi, int end) {
  validate(d);
  if (lo < 0 || hi < lo || hi > end) {
    throw std::invalid_argument(std::string(op) + ": " + what + " [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + ") outside [0, " + std::to_string(end) + ")");
  }
}
void check_cols(const char* op, const DenseDesc& d, int lo, int hi) {
  check_range(op, d, "columns", lo, hi, d.in);
}
void check_rows(const char* op, const DenseDesc& d, int lo, int hi) {
  check_range(op, d, "rows", lo, hi, d.out);
}
}  // namespace

namespace ref {
void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y) {
  validate(d);
  for (int n = 0; n < d.batch; ++n)
    for (int o = 0; o < d.out; ++o) {
      double s = 0;
      for (int i = 0; i < d.in; ++i)
        s += double(x[std::size_t(n) * d.in + i]) * w[std::size_t(o) * d.in + i];
      y[std::size_t(n) * d.out + o] = float(s);
    }
}

void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc) {
  dense_backward_weights_rows(d, x, dy, 0, d.out, dw, acc);  // validates d
}

void dense_backward_data(const DenseDesc& d, const float* w, const float* dy, float* dx) {
  validate(d);
  for (int n = 0; n < d.batch; ++n)
    for (int i = 0; i < d.in; ++i) {
      double s = 0;
      for (int o = 0; o < d.out; ++o)
        s += double(dy[std::size_t(n) * d.out + o]) * w[std::size_t(o) * d.in + i];
      dx[std::size_t(n) * d.in + i] = float(s);
    }
}

void dense_weight_cols(const DenseDesc& d, const float* x, const float* dy, int lo, int hi,
                       float alpha, float beta, float* c) {
  check_cols("dense_weight_cols", d, lo, hi);
  for (int o = 0; o < d.out; ++o)
    for (int i = lo; i < hi; ++i) {
      double s = 0;
      for (int n = 0; n < d.batch; ++n)
        s += double(dy[std::size_t(n) * d.out + o]) * x[std::size_t(n) * d.in + i];
      float& out = c[std::size_t(o) * d.in + i];
      out = float(double(beta) * out + double(alpha) * s);
    }
}

void dense_forward_cols(const DenseDesc& d, const float* x, const float* w, int lo, int hi,
                        float* y) {
  check_cols("dense_forward_cols", d, lo, hi);
  for (int n = 0; n < d.batch; ++n)
    for (int o = 0; o < d.out; ++o) {
      double s = 0;
      for (int i = lo; i < hi; ++i)
        s += double(x[std::size_t(n) * d.in + i]) * w[std::size_t(o) * d.in + i];
      y[std::size_t(n) * d.out + o] = float(s);
    }
}

void dense_backward_data_cols(const DenseDesc& d, const float* w, const float* dy, int lo, int hi,
                              float* dx) {
  check_cols("dense_backward_data_cols", d, lo, hi);
  for (int n = 0; n < d.batch; ++n)
    for (int i = lo; i < hi; ++i) {
      double s = 0;
      for (int o = 0; o < d.out; ++o)
        s += double(dy[std::size_t(n) * d.out + o]) * w[std::size_t(o) * d.in + i];
      dx[std::size_t(n) * d.in + i] = float(s);
    }
}

void dense_backward_weights_rows(const DenseDesc& d, const float* x, const float* dy, int lo,
                                 int hi, float* dw, Accumulate acc) {
  check_rows("dense_backward_weights_rows", d, lo, hi);
  for (int o = lo; o < hi; ++o)
    for (int i = 0; i < d.in; ++i) {
      double s = 0;
      for (int n = 0; n < d.batch; ++n)
        s += double(dy[std::size_t(n) * d.out + o]) * x[std::size_t(n) * d.in + i];
      float& out = dw[std::size_t(o) * d.in + i];
      out = acc == Accumulate::kAdd ? out + float(s) : float(s);
    }
}
}  // namespace ref

namespace cpu {
using detail::sgemm;
using detail::Trans;

void dense_forward(const DenseDesc& d, const float* x, const float* w, float* y) {
  validate(d);
  sgemm(Trans::kNo, Trans::kYes, d.batch, d.out, d.in, 1.0f, x, d.in, w, d.in, 0.0f, y, d.out);
}

void dense_backward_weights(const DenseDesc& d, const float* x, const float* dy, float* dw,
                            Accumulate acc) {
  dense_backward_weights_rows(d, x, dy, 0, d.out, dw, acc);  // the same sgemm, every row
}

void dense_weight_cols(const DenseDesc& d, const float* x, const float* dy, int lo, int hi,
                       float alpha, float beta, float* c) {
  check_cols("dense_weight_cols", d, lo, hi);
  if (lo == hi) return;
  sgemm(Trans::kYes, Trans::kNo, d.out, hi - lo, d.batch, alpha, dy, d.out, x + lo, d.in, beta,
        c + lo, d.in);
}

void dense_forward_cols(const DenseDesc& d, const float* x, const float* w, int lo, int hi,
                        float* y) {
  check_cols("dense_forward_cols", d, lo, hi);
  if (lo == hi) {
    std::fill(y, y + std::size_t(d.batch) * d.out, 0.0f);
    return;
  }
  sgemm(Trans::kNo, Trans::kYes, d.batch, d.out, hi - lo, 1.0f, x + lo, d.in, w + lo, d.in, 0.0f, y,
        d.out);
}

void dense_backward_data_cols(const DenseDesc& d, const float* w, const float* dy, int lo, int hi,
                              float* dx) {
  check_cols("dense_backward_data_cols", d, lo, hi);
  if (lo == hi) return;
  sgemm(Trans::kNo, Trans::kNo, d.batch, hi - lo, d.out, 1.0f, dy, d.out, w + lo, d.in, 0.0f,
        dx + lo, d.in);
}

void dense_backward_weights_rows(const DenseDesc& d, const float* x, const float* dy, int lo,
                                 int hi, float* dw, Accumulate acc) {
  check_rows("dense_backward_weights_rows", d, lo, hi);
  if (lo == hi) return;
  const float beta = acc == Accumulate::kAdd ? 1.0f : 0.0f;
  sgemm(Trans::kYes, Trans::kNo, hi - lo, d.in, d.batch, 1.0f, dy + lo, d.out, x, d.in, beta,
        dw + std::size_t(lo) * d.in, d.in);
}

void dense_backward_data(const DenseDesc& d, const float* w, const float* dy, float* dx) {
  validate(d);
  sgemm(Trans::kNo, Trans::kNo, d.batch, d.in, d.out, 1.0f, dy, d.out, w, d.in, 0.0f, dx, d.in);
}
}  // namespace cpu

}  // namespace gpurun::kernels

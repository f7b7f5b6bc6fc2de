// lowrank.cc: the row passes of a rank-r approximation with error feedback (lowrank.h). Each
// loop is compiled for AVX-512, AVX2 and baseline x86-64 (simd.h): the passes are a few FMAs an
// element, which SSE2 alone makes compute-bound.
#include "gpurun/kernels/lowrank.h"

#include <algorithm>

#include "simd.h"

namespace gpurun::kernels::cpu {
namespace {

constexpr int kPiece = 1024;  // floats of a row of p q^T at a time, in L1

// The dot product of a and b (n floats) in 16 running sums, so that it vectorises without
// leave to reorder the sum.
GPURUN_SIMD_CLONES float dot(const float* a, const float* b, int n) {
  float acc[16] = {};
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[j + l] * b[j + l];
  float sum = 0;
  for (; j < n; ++j) sum += a[j] * b[j];
  for (float x : acc) sum += x;
  return sum;
}

GPURUN_SIMD_CLONES void approx(const float* pr, const float* q_t, int cols, int rank, int col,
                               int len, float* out) {
  std::fill(out, out + len, 0.0f);
  for (int k = 0; k < rank; ++k) {
    const float* qk = q_t + std::size_t(k) * std::size_t(cols) + col;
    for (int j = 0; j < len; ++j) out[j] += pr[k] * qk[j];
  }
}

// m = g + (m - share * a) over n floats.
GPURUN_SIMD_CLONES void add_error(const float* g, const float* a, float share, int n, float* m) {
  for (int j = 0; j < n; ++j) m[j] = g[j] + (m[j] - a[j] * share);
}

// m -= a * share over n floats.
GPURUN_SIMD_CLONES void subtract(const float* a, float share, int n, float* m) {
  for (int j = 0; j < n; ++j) m[j] = m[j] - a[j] * share;
}

// Columns [col, col + len) of q_t[k] += sum over four rows i of p[i][k] m[i], for each k.
GPURUN_SIMD_CLONES void add_four_rows(const float* m0, int cols, const float* p, int rank,
                                      int col, int len, float* q_t) {
  const float *m1 = m0 + cols, *m2 = m1 + cols, *m3 = m2 + cols;
  for (int k = 0; k < rank; ++k) {
    const float a0 = p[k], a1 = p[rank + k], a2 = p[2 * rank + k], a3 = p[3 * rank + k];
    float* qk = q_t + std::size_t(k) * std::size_t(cols);
    for (int j = col; j < col + len; ++j)
      qk[j] += a0 * m0[j] + a1 * m1[j] + a2 * m2[j] + a3 * m3[j];
  }
}

GPURUN_SIMD_CLONES void add_row(const float* m, int cols, const float* p, int rank, int col,
                                int len, float* q_t) {
  for (int k = 0; k < rank; ++k) {
    float* qk = q_t + std::size_t(k) * std::size_t(cols);
    for (int j = col; j < col + len; ++j) qk[j] += p[k] * m[j];
  }
}

}  // namespace

void lowrank_add_and_project(const LowRankDesc& d, const float* g, float* m, float* p,
                             const float* q_t, float share, bool last, int lo, int hi) {
  float a[kPiece];
  for (int row = lo; row < hi; ++row) {
    const std::size_t at = std::size_t(row) * std::size_t(d.cols);
    float* pr = p + std::size_t(row) * std::size_t(d.rank);
    if (last) {
      for (int j0 = 0; j0 < d.cols; j0 += kPiece) {
        const int len = std::min(kPiece, d.cols - j0);
        approx(pr, q_t, d.cols, d.rank, j0, len, a);
        add_error(g + at + j0, a, share, len, m + at + j0);
      }
    } else {
      std::copy(g + at, g + at + d.cols, m + at);
    }
    for (int k = 0; k < d.rank; ++k)  // the row is in L2 now
      pr[k] = dot(m + at, q_t + std::size_t(k) * std::size_t(d.cols), d.cols);
  }
}

void lowrank_project_transposed(const LowRankDesc& d, const float* m, const float* p, float* q_t,
                                int col, int len) {
  for (int k = 0; k < d.rank; ++k) {
    float* qk = q_t + std::size_t(k) * std::size_t(d.cols) + col;
    std::fill(qk, qk + len, 0.0f);
  }
  int row = 0;
  for (; row + 4 <= d.rows; row += 4)  // four rows of m at a time: q_t is read and written 1/4
    add_four_rows(m + std::size_t(row) * std::size_t(d.cols), d.cols,
                  p + std::size_t(row) * std::size_t(d.rank), d.rank, col, len, q_t);
  for (; row < d.rows; ++row)
    add_row(m + std::size_t(row) * std::size_t(d.cols), d.cols,
            p + std::size_t(row) * std::size_t(d.rank), d.rank, col, len, q_t);
}

void lowrank_subtract_piece(const LowRankDesc& d, float* m, const float* p, const float* q_t,
                            float share, int col, int len) {
  float a[kPiece];
  for (int row = 0; row < d.rows; ++row)
    for (int j0 = col; j0 < col + len; j0 += kPiece) {
      const int n = std::min(kPiece, col + len - j0);
      approx(p + std::size_t(row) * std::size_t(d.rank), q_t, d.cols, d.rank, j0, n, a);
      subtract(a, share, n, m + std::size_t(row) * std::size_t(d.cols) + j0);
    }
}

void lowrank_project_piece(const LowRankDesc& d, const float* m, const float* q_t, float* p_next,
                           int col, int len) {
  for (int row = 0; row < d.rows; ++row)
    for (int k = 0; k < d.rank; ++k)
      p_next[std::size_t(row) * std::size_t(d.rank) + k] +=
          dot(m + std::size_t(row) * std::size_t(d.cols) + col,
              q_t + std::size_t(k) * std::size_t(d.cols) + col, len);
}

void lowrank_approx_piece(const LowRankDesc& d, const float* p, const float* q_t, int row, int col,
                          int len, float* out) {
  approx(p + std::size_t(row) * std::size_t(d.rank), q_t, d.cols, d.rank, col, len, out);
}

}  // namespace gpurun::kernels::cpu

// lowrank.cc: the passes of a rank-r approximation with error feedback (lowrank.h). Each pass
// loads each float of M and Q once for a block of them: P Q^T and M Q keep their running sums in
// registers, four rows a column (or sixteen lanes) at a time, the ranks' terms four, two or one
// at a time; M^T P adds four rows at a time into a piece of Q^T in L1. So each pass runs at
// about the speed of its one read (and write) of M. The loops are compiled for AVX-512, AVX2 and
// baseline x86-64 (simd.h), and every clone does the same arithmetic per element: sums run in a
// fixed order (the lanes of M Q are explicit), so the bits do not depend on the clone or on how
// rows or columns are split between calls.
#include "gpurun/kernels/lowrank.h"

#include <algorithm>
#include <cstddef>

#include "simd.h"

namespace gpurun::kernels::cpu {
namespace {

#define GPURUN_INLINE inline __attribute__((always_inline))

// How many of the rank's terms the next group takes, from k on: four, two or one.
int group(int rank, int k) {
  const int left = rank - k;
  return left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

// c[r][j] (+)= alpha * sum over k < G of p[r][k] q[k][j], for NR rows (p's ldp, c's ldc apart)
// and len columns (q's rows ldq apart): each q value is loaded once for the NR rows.
template <int NR, int G, bool Add>
GPURUN_INLINE void product_block(const float* __restrict p, int ldp, const float* __restrict q,
                                 std::size_t ldq, int len, float alpha, float* __restrict c,
                                 std::size_t ldc) {
  float a[NR][G];
  for (int r = 0; r < NR; ++r)
    for (int k = 0; k < G; ++k) a[r][k] = p[r * ldp + k];
  for (int j = 0; j < len; ++j) {
    float qv[G];
    for (int k = 0; k < G; ++k) qv[k] = q[k * ldq + j];
    for (int r = 0; r < NR; ++r) {
      float s = 0.0f;
      for (int k = 0; k < G; ++k) s += a[r][k] * qv[k];
      float& out = c[r * ldc + j];
      out = Add ? out + alpha * s : alpha * s;
    }
  }
}

template <int G, bool Add>
GPURUN_INLINE void product_rows(const float* p, int ldp, const float* q, std::size_t ldq, int rows,
                                int len, float alpha, float* c, std::size_t ldc) {
  int r = 0;
  for (; r + 4 <= rows; r += 4)
    product_block<4, G, Add>(p + r * ldp, ldp, q, ldq, len, alpha, c + r * ldc, ldc);
  for (; r < rows; ++r)
    product_block<1, G, Add>(p + r * ldp, ldp, q, ldq, len, alpha, c + r * ldc, ldc);
}

// One group of terms (G of them, from p's column 0 and q's row 0) of lowrank_product.
GPURUN_SIMD_CLONES void product_group(int g, bool add, const float* p, int ldp, const float* q,
                                      std::size_t ldq, int rows, int len, float alpha, float* c,
                                      std::size_t ldc) {
  if (g == 4 && add) product_rows<4, true>(p, ldp, q, ldq, rows, len, alpha, c, ldc);
  if (g == 4 && !add) product_rows<4, false>(p, ldp, q, ldq, rows, len, alpha, c, ldc);
  if (g == 2 && add) product_rows<2, true>(p, ldp, q, ldq, rows, len, alpha, c, ldc);
  if (g == 2 && !add) product_rows<2, false>(p, ldp, q, ldq, rows, len, alpha, c, ldc);
  if (g == 1 && add) product_rows<1, true>(p, ldp, q, ldq, rows, len, alpha, c, ldc);
  if (g == 1 && !add) product_rows<1, false>(p, ldp, q, ldq, rows, len, alpha, c, ldc);
}

// out[r][k] += sum over j < len of m[r][j] q[k][j], for NR rows of m and G rows of q: sixteen
// running sums (lanes) each, added after the tail in lane order.
template <int NR, int G>
GPURUN_INLINE void project_block(const float* __restrict m, std::size_t ldm,
                                 const float* __restrict q, std::size_t ldq, int len,
                                 float* __restrict out, int ldo) {
  float acc[NR][G][16] = {};
  int j = 0;
  for (; j + 16 <= len; j += 16)
    for (int r = 0; r < NR; ++r)
      for (int k = 0; k < G; ++k)
        for (int l = 0; l < 16; ++l) acc[r][k][l] += m[r * ldm + j + l] * q[k * ldq + j + l];
  for (int r = 0; r < NR; ++r)
    for (int k = 0; k < G; ++k) {
      float s = 0.0f;
      for (int t = j; t < len; ++t) s += m[r * ldm + t] * q[k * ldq + t];
      for (int l = 0; l < 16; ++l) s += acc[r][k][l];
      out[r * ldo + k] += s;
    }
}

template <int G>
GPURUN_INLINE void project_rows(const float* m, std::size_t ldm, const float* q, std::size_t ldq,
                                int rows, int len, float* out, int ldo) {
  int r = 0;
  for (; r + 4 <= rows; r += 4)
    project_block<4, G>(m + r * ldm, ldm, q, ldq, len, out + r * ldo, ldo);
  for (; r < rows; ++r) project_block<1, G>(m + r * ldm, ldm, q, ldq, len, out + r * ldo, ldo);
}

GPURUN_SIMD_CLONES void project_group(int g, const float* m, std::size_t ldm, const float* q,
                                      std::size_t ldq, int rows, int len, float* out, int ldo) {
  if (g == 4) project_rows<4>(m, ldm, q, ldq, rows, len, out, ldo);
  if (g == 2) project_rows<2>(m, ldm, q, ldq, rows, len, out, ldo);
  if (g == 1) project_rows<1>(m, ldm, q, ldq, rows, len, out, ldo);
}

// Columns [col, col + len) of q_t[k] += sum over four rows i of p[i][k] m[i], for each k: q_t's
// piece stays in L1 as the rows of m go by, read and written once for four of them.
GPURUN_SIMD_CLONES void add_four_rows(const float* m0, int cols, const float* p, int rank, int col,
                                      int len, float* q_t) {
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

// m = g + m over n floats.
GPURUN_SIMD_CLONES void add_gradient(const float* g, std::size_t n, float* m) {
  for (std::size_t j = 0; j < n; ++j) m[j] = g[j] + m[j];
}

}  // namespace

void lowrank_product(const LowRankDesc& d, const float* p, const float* q_t, int row0, int rows,
                     int col, int len, float alpha, bool add, float* c, int ldc) {
  const float* pr = p + std::size_t(row0) * std::size_t(d.rank);
  for (int k = 0; k < d.rank; k += group(d.rank, k))
    product_group(group(d.rank, k), add || k > 0, pr + k, d.rank,
                  q_t + std::size_t(k) * std::size_t(d.cols) + col, std::size_t(d.cols), rows, len,
                  alpha, c, std::size_t(ldc));
}

void lowrank_project_piece(const LowRankDesc& d, const float* m, const float* q_t, float* p_next,
                           int col, int len) {
  for (int k = 0; k < d.rank; k += group(d.rank, k))
    project_group(group(d.rank, k), m + col, std::size_t(d.cols),
                  q_t + std::size_t(k) * std::size_t(d.cols) + col, std::size_t(d.cols), d.rows,
                  len, p_next + k, d.rank);
}

void lowrank_project_transposed(const LowRankDesc& d, const float* m, const float* p, float* q_t,
                                int col, int len) {
  for (int k = 0; k < d.rank; ++k) {
    float* qk = q_t + std::size_t(k) * std::size_t(d.cols) + col;
    std::fill(qk, qk + len, 0.0f);
  }
  int row = 0;
  for (; row + 4 <= d.rows; row += 4)
    add_four_rows(m + std::size_t(row) * std::size_t(d.cols), d.cols,
                  p + std::size_t(row) * std::size_t(d.rank), d.rank, col, len, q_t);
  for (; row < d.rows; ++row)
    add_row(m + std::size_t(row) * std::size_t(d.cols), d.cols,
            p + std::size_t(row) * std::size_t(d.rank), d.rank, col, len, q_t);
}

void lowrank_add_and_project(const LowRankDesc& d, const float* g, float* m, float* p,
                             const float* q_t, float share, bool last, int lo, int hi) {
  constexpr int kRows = 4;  // 4 rows of the MNIST CNN's M are 346 kB: in L2 for all three steps
  for (int r0 = lo; r0 < hi; r0 += kRows) {
    const int rows = std::min(kRows, hi - r0);
    const std::size_t at = std::size_t(r0) * std::size_t(d.cols);
    const std::size_t n = std::size_t(rows) * std::size_t(d.cols);
    float* pr = p + std::size_t(r0) * std::size_t(d.rank);
    if (last) {
      lowrank_product(d, p, q_t, r0, rows, 0, d.cols, -share, true, m + at, d.cols);
      add_gradient(g + at, n, m + at);  // the block's rows are contiguous
    } else {
      std::copy(g + at, g + at + n, m + at);
    }
    std::fill(pr, pr + std::size_t(rows) * std::size_t(d.rank), 0.0f);
    const LowRankDesc block{rows, d.cols, d.rank};
    lowrank_project_piece(block, m + at, q_t, pr, 0, d.cols);
  }
}

}  // namespace gpurun::kernels::cpu

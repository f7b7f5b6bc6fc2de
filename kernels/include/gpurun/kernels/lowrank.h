// lowrank.h: the row passes of a rank-r approximation M ~ P Q^T with error feedback, as PowerSGD
// compresses a gradient (runtime/src/cpu/powersgd.h). M is rows x cols, P rows x rank, and Q is
// kept transposed, rank x cols (the layout the dense kernels take as weights); all row-major.
// Each pass goes over M once: a row at a time, or a piece of columns at a time.
#pragma once

#include <cstddef>

namespace gpurun::kernels {

struct LowRankDesc {
  int rows = 0, cols = 0, rank = 0;
};

namespace cpu {

// For rows [lo, hi): m = g + (m - share * p q^T) with the p and q_t given (the last step's
// error, formed as it is added; with `last` false, m = g), then p = m q: each row of p is read
// for the first and then written.
void lowrank_add_and_project(const LowRankDesc& d, const float* g, float* m, float* p,
                             const float* q_t, float share, bool last, int lo, int hi);
// Columns [col, col + len) of q_t = p^T m.
void lowrank_project_transposed(const LowRankDesc& d, const float* m, const float* p, float* q_t,
                                int col, int len);
// The same pass a piece of columns at a time, for a gradient formed straight into m (a deferred
// weight gradient, dZ^T X, added a piece at a time): first m -= share * p q^T over columns
// [col, col + len) of every row (lowrank_product), then (the gradient added)
// p_next += m q over those columns: after every piece, from p_next = 0, p_next = m q.
void lowrank_project_piece(const LowRankDesc& d, const float* m, const float* q_t, float* p_next,
                           int col, int len);
// c = alpha * (p q^T)[rows [row0, row0 + rows), columns [col, col + len)], plus c itself with
// `add`; c's rows ldc floats apart: the error's removal from m (add), M^ itself, or a plain SGD
// step straight from p and q (add, alpha -lr / ranks).
void lowrank_product(const LowRankDesc& d, const float* p, const float* q_t, int row0, int rows,
                     int col, int len, float alpha, bool add, float* c, int ldc);

}  // namespace cpu
}  // namespace gpurun::kernels

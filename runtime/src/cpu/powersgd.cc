// PowerSGD gradient compression (powersgd.h).
#include "cpu/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "model/rng.h"

namespace gpurun::runtime::cpu {

void orthonormalize_columns(float* p, int rows, int cols) {
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < j; ++i) {
      double dot = 0;
      for (int k = 0; k < rows; ++k) dot += double(p[k * cols + i]) * p[k * cols + j];
      for (int k = 0; k < rows; ++k) p[k * cols + j] -= float(dot) * p[k * cols + i];
    }
    double norm = 0;
    for (int k = 0; k < rows; ++k) norm += double(p[k * cols + j]) * p[k * cols + j];
    norm = std::sqrt(norm);
    const float scale = norm > 1e-12 ? float(1.0 / norm) : 0.0f;
    for (int k = 0; k < rows; ++k) p[k * cols + j] *= scale;
  }
}

PowerSgd::PowerSgd(const std::vector<LowRankMatrix>& candidates, std::size_t buffer_floats,
                   int rank, int ranks, std::uint64_t seed)
    : rank_(rank), ranks_(ranks), buffer_floats_(buffer_floats) {
  if (rank < 1)
    throw std::invalid_argument("PowerSGD rank " + std::to_string(rank) + ": must be >= 1");
  Rng rng(seed);
  std::size_t at = 0;
  std::vector<LowRankMatrix> sorted = candidates;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  for (const LowRankMatrix& m : sorted) {
    const std::size_t full = std::size_t(m.rows) * std::size_t(m.in);
    if (m.offset + full > buffer_floats || m.offset < at)
      throw std::invalid_argument("PowerSGD: a matrix outside the buffer, or two that overlap");
    if (2 * std::size_t(m.rows + m.in) * std::size_t(rank) > full) continue;  // would not shrink
    Compressed c{m,
                 FloatBuffer(std::size_t(rank) * m.in),
                 FloatBuffer(std::size_t(m.rows) * rank),
                 FloatBuffer(full),
                 m.rows,
                 false,
                 FloatBuffer(std::size_t(m.rows) * rank)};
    for (std::size_t i = 0; i < c.q_t.size(); ++i) c.q_t[i] = rng.uniform(-1.0f, 1.0f);
    c.m_last.fill(0.0f);
    if (m.offset > at) rest_.push_back({at, m.offset});
    at = m.offset + full;
    p_floats_ += c.p.size();
    q_floats_ += c.q_t.size();
    mats_.push_back(std::move(c));
  }
  if (at < buffer_floats) rest_.push_back({at, buffer_floats});
  for (const auto& [b, e] : rest_) rest_floats_ += e - b;
  send_p_ = FloatBuffer(p_floats_ + rest_floats_);
  send_q_ = FloatBuffer(std::max<std::size_t>(q_floats_, 1));
  block_ = FloatBuffer(std::size_t(kApplyRows) * kSumColumns);
}

void PowerSgd::pack_rest(const float* grads, float* to) const {
  for (const auto& [b, e] : rest_) to = std::copy(grads + b, grads + e, to);
}

void PowerSgd::unpack_rest(const float* from, float* grads) const {
  for (const auto& [b, e] : rest_) {
    std::copy(from, from + (e - b), grads + b);
    from += e - b;
  }
}

// Three passes over each matrix (the kernels of lowrank.h; bench/powersgd_cost times them). In
// training the first forms a deferred G into M a piece of columns at a time
// (add_deferred_and_project), or runs on backward's blocks of rows as each is final (rows_final),
// and the last hands M^ to the optimizer a block at a time, or adds it to the parameters
// straight from P and Q: neither reads an M^ or a G that is not in cache.

void PowerSgd::add_error_and_project(Compressed& c, const float* g, int lo, int hi) const {
  kernels::cpu::lowrank_add_and_project(desc(c), g, c.m_last.data(), c.p.data(), c.q_t.data(),
                                        share(), c.has_last, lo, hi);
}

void PowerSgd::add_deferred_and_project(Compressed& c, const AddGradient& add) {
  c.p_next.fill(0.0f);
  for (int j0 = 0; j0 < c.m.in; j0 += kChunk) {
    const int len = std::min(kChunk, c.m.in - j0);
    if (c.has_last)
      kernels::cpu::lowrank_product(desc(c), c.p.data(), c.q_t.data(), 0, c.m.rows, j0, len,
                                    -share(), true, c.m_last.data() + j0, c.m.in);
    add(c.m, j0, j0 + len, c.m_last.data());
    kernels::cpu::lowrank_project_piece(desc(c), c.m_last.data(), c.q_t.data(), c.p_next.data(),
                                        j0, len);
  }
  std::swap(c.p, c.p_next);
}

bool PowerSgd::compresses(std::size_t offset) const {
  for (const Compressed& c : mats_)
    if (c.m.offset == offset) return true;
  return false;
}

void PowerSgd::decompress(Compressed& c, int j0, int len, float* m, const Apply& apply,
                          const std::function<void()>& progress) {
  const kernels::LowRankDesc d = desc(c);
  for (int r0 = 0; r0 < c.m.rows; r0 += kApplyRows) {
    progress();
    const int rows = std::min(kApplyRows, c.m.rows - r0);
    const std::size_t at = std::size_t(r0) * std::size_t(c.m.in) + std::size_t(j0);
    if (apply.into) {
      kernels::cpu::lowrank_product(d, c.p.data(), c.q_t.data(), r0, rows, j0, len, apply.scale,
                                    true, apply.into + c.m.offset + at, c.m.in);
    } else if (!apply.piece) {
      kernels::cpu::lowrank_product(d, c.p.data(), c.q_t.data(), r0, rows, j0, len, 1.0f, false,
                                    m + at, c.m.in);
    } else {
      kernels::cpu::lowrank_product(d, c.p.data(), c.q_t.data(), r0, rows, j0, len, 1.0f, false,
                                    block_.data(), len);
      for (int i = 0; i < rows; ++i)
        apply.piece(c.m.offset + at + std::size_t(i) * std::size_t(c.m.in),
                    block_.data() + std::size_t(i) * std::size_t(len), std::size_t(len));
    }
  }
}

void PowerSgd::rows_final(float* grads, std::size_t from) {
  for (Compressed& c : mats_) {
    const std::size_t in = std::size_t(c.m.in);
    const std::size_t first =
        from <= c.m.offset ? 0 : std::min<std::size_t>((from - c.m.offset + in - 1) / in, c.m.rows);
    if (int(first) >= c.projected_from) continue;
    add_error_and_project(c, grads + c.m.offset, int(first), c.projected_from);
    c.projected_from = int(first);
  }
}

void PowerSgd::allreduce_sum(const Sum& sum, float* grads, const Apply& apply, const Start& start,
                             const AddGradient& add) {
  // P = (M + E) Q for each matrix (the rows rows_final() left), sent with the rest of the buffer.
  float* out = send_p_.data();
  for (Compressed& c : mats_) {
    if (add)
      add_deferred_and_project(c, add);
    else
      add_error_and_project(c, grads + c.m.offset, 0, c.projected_from);
    c.projected_from = c.m.rows;  // the next step's rows are not final yet
    out = std::copy(c.p.data(), c.p.data() + c.p.size(), out);
  }
  pack_rest(grads, out);
  sum(send_p_.data(), send_p_.size());
  unpack_rest(send_p_.data() + p_floats_, grads);
  const float* in = send_p_.data();
  for (Compressed& c : mats_) {  // the same P on every rank
    std::copy(in, in + c.p.size(), c.p.data());
    in += c.p.size();
    orthonormalize_columns(c.p.data(), c.m.rows, rank_);
  }
  exchange_q(sum, start, grads, apply);
}

// Q = M^T P a piece of columns at a time, each piece packed into send_q_ (its rank rows one
// after another) and, with `start`, its sum started at once; then, as each piece's sum ends, M^'s
// columns of it: the link carries one piece while the next is made or used.
void PowerSgd::exchange_q(const Sum& sum, const Start& start, float* grads, const Apply& apply) {
  struct Piece {
    Compressed* c;
    int j0, len;
    float* at;
    std::unique_ptr<PendingSum> sum;
  };
  std::vector<Piece> pieces;
  const auto progress = [&pieces] {  // Open MPI moves a non-blocking sum only inside its calls
    for (Piece& p : pieces)
      if (p.sum) p.sum->test();
  };
  float* at = send_q_.data();
  for (Compressed& c : mats_)
    for (int j0 = 0; j0 < c.m.in; j0 += kSumColumns) {
      const int len = std::min(kSumColumns, c.m.in - j0);
      for (int j = j0; j < j0 + len; j += kChunk) {
        kernels::cpu::lowrank_project_transposed(desc(c), c.m_last.data(), c.p.data(),
                                                 c.q_t.data(), j, std::min(kChunk, j0 + len - j));
        progress();
      }
      for (int k = 0; k < rank_; ++k)
        std::copy_n(c.q_t.data() + std::size_t(k) * c.m.in + j0, len, at + std::size_t(k) * len);
      pieces.push_back({&c, j0, len, at, start ? start(at, std::size_t(rank_) * len) : nullptr});
      at += std::size_t(rank_) * len;
    }
  if (!start && !mats_.empty()) sum(send_q_.data(), q_floats_);
  for (Piece& p : pieces) {
    if (p.sum) p.sum->wait();
    for (int k = 0; k < rank_; ++k)  // the sum: M^'s, and the next step's warm start
      std::copy_n(p.at + std::size_t(k) * p.len, p.len,
                  p.c->q_t.data() + std::size_t(k) * p.c->m.in + p.j0);
    decompress(*p.c, p.j0, p.len, grads + p.c->m.offset, apply, progress);
  }
  for (Compressed& c : mats_) c.has_last = true;
}

std::string PowerSgd::summary() const {
  char text[128];
  std::snprintf(text, sizeof text, "PowerSGD rank %d: %zu %s, %.2f MB -> %.2f MB a step", rank_,
                mats_.size(), mats_.size() == 1 ? "matrix" : "matrices",
                4e-6 * double(buffer_floats_), 1e-6 * double(bytes_per_step()));
  return text;
}

}  // namespace gpurun::runtime::cpu

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
    Compressed c{m, FloatBuffer(std::size_t(rank) * m.in), FloatBuffer(std::size_t(m.rows) * rank),
                 FloatBuffer(full), m.rows};
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
// training the first runs on backward's blocks of rows as each is final (rows_final), and the last
// hands M^ to the optimizer a piece at a time: neither reads an M^ or a G that is not in cache.

void PowerSgd::add_error_and_project(Compressed& c, const float* g, int lo, int hi) const {
  kernels::cpu::lowrank_add_and_project(desc(c), g, c.m_last.data(), c.p.data(), c.q_t.data(),
                                        1.0f / float(ranks_), c.has_last, lo, hi);
}

void PowerSgd::decompress(Compressed& c, float* m, const Apply& apply) const {
  float approx[kChunk];
  const int in = c.m.in;
  for (int row = 0; row < c.m.rows; ++row)
    for (int j0 = 0; j0 < in; j0 += kChunk) {
      const int len = std::min(kChunk, in - j0);
      kernels::cpu::lowrank_approx_piece(desc(c), c.p.data(), c.q_t.data(), row, j0, len, approx);
      if (apply)
        apply(c.m.offset + std::size_t(row) * in + j0, approx, std::size_t(len));
      else
        std::copy(approx, approx + len, m + std::size_t(row) * in + j0);
    }
  c.has_last = true;
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

void PowerSgd::allreduce_sum(const Sum& sum, float* grads, const Apply& apply) {
  // P = (M + E) Q for each matrix (the rows rows_final() left), sent with the rest of the buffer.
  float* out = send_p_.data();
  for (Compressed& c : mats_) {
    add_error_and_project(c, grads + c.m.offset, 0, c.projected_from);
    c.projected_from = c.m.rows;  // the next step's rows are not final yet
    out = std::copy(c.p.data(), c.p.data() + c.p.size(), out);
  }
  pack_rest(grads, out);
  sum(send_p_.data(), send_p_.size());
  unpack_rest(send_p_.data() + p_floats_, grads);
  // Q = M^T P from the orthonormalized sum of P: the same P on every rank.
  const float* in = send_p_.data();
  float* q_out = send_q_.data();
  for (Compressed& c : mats_) {
    std::copy(in, in + c.p.size(), c.p.data());
    in += c.p.size();
    orthonormalize_columns(c.p.data(), c.m.rows, rank_);
    for (int j0 = 0; j0 < c.m.in; j0 += kChunk)
      kernels::cpu::lowrank_project_transposed(desc(c), c.m_last.data(), c.p.data(),
                                               c.q_t.data(), j0, std::min(kChunk, c.m.in - j0));
    q_out = std::copy(c.q_t.data(), c.q_t.data() + c.q_t.size(), q_out);
  }
  if (!mats_.empty()) sum(send_q_.data(), q_floats_);
  // M^ = P Q^T replaces M (or goes to `apply`); the next step's E is formed from M, P and Q.
  const float* q_in = send_q_.data();
  for (Compressed& c : mats_) {
    std::copy(q_in, q_in + c.q_t.size(), c.q_t.data());  // the next step's warm start
    q_in += c.q_t.size();
    decompress(c, grads + c.m.offset, apply);
  }
}

std::string PowerSgd::summary() const {
  char text[128];
  std::snprintf(text, sizeof text, "PowerSGD rank %d: %zu %s, %.2f MB -> %.2f MB a step", rank_,
                mats_.size(), mats_.size() == 1 ? "matrix" : "matrices",
                4e-6 * double(buffer_floats_), 1e-6 * double(bytes_per_step()));
  return text;
}

}  // namespace gpurun::runtime::cpu

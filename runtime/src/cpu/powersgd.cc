// PowerSGD gradient compression (powersgd.h).
#include "cpu/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "model/rng.h"

namespace gpurun::runtime::cpu {

namespace {

// Modified Gram-Schmidt on `count` vectors of `length` floats, element k of vector j at
// a[j * vec + k * elem].
void orthonormalize(float* a, int count, int length, std::size_t vec, std::size_t elem) {
  const auto at = [&](int j, int k) -> float& {
    return a[std::size_t(j) * vec + std::size_t(k) * elem];
  };
  for (int j = 0; j < count; ++j) {
    for (int i = 0; i < j; ++i) {
      double dot = 0;
      for (int k = 0; k < length; ++k) dot += double(at(i, k)) * at(j, k);
      for (int k = 0; k < length; ++k) at(j, k) -= float(dot) * at(i, k);
    }
    double norm = 0;
    for (int k = 0; k < length; ++k) norm += double(at(j, k)) * at(j, k);
    norm = std::sqrt(norm);
    const float scale = norm > 1e-12 ? float(1.0 / norm) : 0.0f;
    for (int k = 0; k < length; ++k) at(j, k) *= scale;
  }
}

}  // namespace

void orthonormalize_columns(float* p, int rows, int cols) {
  orthonormalize(p, cols, rows, 1, std::size_t(cols));
}

void orthonormalize_rows(float* q, int rows, int cols) {
  orthonormalize(q, rows, cols, std::size_t(cols), 1);
}

PowerSgd::PowerSgd(const std::vector<LowRankMatrix>& candidates, std::size_t buffer_floats,
                   int rank, int ranks, std::uint64_t seed, bool alternate)
    : rank_(rank), ranks_(ranks), alternate_(alternate), buffer_floats_(buffer_floats) {
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
                 FloatBuffer(std::size_t(m.rows) * rank),
                 FloatBuffer(alternate ? std::size_t(rank) * m.in : 0)};
    for (std::size_t i = 0; i < c.q_t.size(); ++i) c.q_t[i] = rng.uniform(-1.0f, 1.0f);
    c.m_last.fill(0.0f);
    if (alternate) prepare_alternating(c);  // the first step makes P
    if (m.offset > at) rest_.push_back({at, m.offset});
    at = m.offset + full;
    p_floats_ += c.p.size();
    q_floats_ += c.q_t.size();
    mats_.push_back(std::move(c));
  }
  if (at < buffer_floats) rest_.push_back({at, buffer_floats});
  for (const auto& [b, e] : rest_) rest_floats_ += e - b;
  send_p_ = FloatBuffer((alternate ? std::max(p_floats_, q_floats_) : p_floats_) + rest_floats_);
  send_q_ = FloatBuffer(alternate ? 0 : std::max<std::size_t>(q_floats_, 1));
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

// Vogels et al.'s PowerSGD: three passes over each matrix (the kernels of lowrank.h;
// bench/powersgd_cost times them; the alternating form, below, makes one). In
// training the first forms a deferred G into M a piece of columns at a time
// (add_deferred_and_project), or runs on backward's blocks of rows as each is final (rows_final),
// and the last hands M^ to the optimizer a block at a time, or adds it to the parameters
// straight from P and Q: neither reads an M^ or a G that is not in cache.

void PowerSgd::add_error_and_project(Compressed& c, const float* g, int lo, int hi) const {
  kernels::cpu::lowrank_add_and_project(desc(c), g, c.m_last.data(), c.p.data(), c.q_t.data(),
                                        share(), c.has_last, lo, hi);
}

void PowerSgd::form_pieces(Compressed& c, const float* g, const AddGradient& add,
                           const std::function<void(int j0, int len)>& project) const {
  float* m = c.m_last.data();
  const std::size_t in = std::size_t(c.m.in);
  for (int j0 = 0; j0 < c.m.in; j0 += kChunk) {
    const int len = std::min(kChunk, c.m.in - j0);
    if (c.has_last)
      kernels::cpu::lowrank_product(desc(c), c.p.data(), c.q_t.data(), 0, c.m.rows, j0, len,
                                    -share(), true, m + j0, c.m.in);
    if (add) {
      add(c.m, j0, j0 + len, m);
    } else {
      for (std::size_t r = 0; r < std::size_t(c.m.rows); ++r)
        for (std::size_t j = r * in + j0; j < r * in + j0 + len; ++j) m[j] += g[j];
    }
    project(j0, len);
  }
}

void PowerSgd::add_deferred_and_project(Compressed& c, const AddGradient& add) {
  c.p_next.fill(0.0f);
  form_pieces(c, nullptr, add, [&](int j0, int len) {
    kernels::cpu::lowrank_project_piece(desc(c), c.m_last.data(), c.q_t.data(), c.p_next.data(),
                                        j0, len);
  });
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
  if (alternate_) return;  // its one pass forms M in pieces of columns
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
  if (alternate_) return alternating_sum(sum, start, grads, apply, add);
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
  std::vector<QPiece> pieces;
  float* at = send_q_.data();
  for (Compressed& c : mats_)
    for (int j0 = 0; j0 < c.m.in; j0 += kSumColumns) {
      const int len = std::min(kSumColumns, c.m.in - j0);
      for (int j = j0; j < j0 + len; j += kChunk) {
        kernels::cpu::lowrank_project_transposed(desc(c), c.m_last.data(), c.p.data(),
                                                 c.q_t.data(), j, std::min(kChunk, j0 + len - j));
        test_pieces(pieces);
      }
      start_q_piece(pieces, c, j0, len, at, start);
    }
  if (!start && !mats_.empty()) sum(send_q_.data(), q_floats_);
  finish_q_pieces(pieces, grads, apply);
  for (Compressed& c : mats_) c.has_last = true;
}

void PowerSgd::start_q_piece(std::vector<QPiece>& pieces, Compressed& c, int j0, int len,
                             float*& at, const Start& start) const {
  for (int k = 0; k < rank_; ++k)
    std::copy_n(c.q_t.data() + std::size_t(k) * c.m.in + j0, len, at + std::size_t(k) * len);
  pieces.push_back({&c, j0, len, at, start ? start(at, std::size_t(rank_) * len) : nullptr});
  at += std::size_t(rank_) * len;
}

void PowerSgd::finish_q_pieces(std::vector<QPiece>& pieces, float* grads, const Apply& apply) {
  const auto progress = [&pieces] { test_pieces(pieces); };
  for (QPiece& p : pieces) {
    if (p.sum) p.sum->wait();
    for (int k = 0; k < rank_; ++k)
      std::copy_n(p.at + std::size_t(k) * p.len, p.len,
                  p.c->q_t.data() + std::size_t(k) * p.c->m.in + p.j0);
    decompress(*p.c, p.j0, p.len, grads + p.c->m.offset, apply, progress);
  }
}

void PowerSgd::test_pieces(std::vector<QPiece>& pieces) {
  for (QPiece& p : pieces)
    if (p.sum) p.sum->test();
}

// ACP-SGD: one pass over each M (its thin matrix made as it is formed), one sum, M^ applied.
void PowerSgd::alternating_sum(const Sum& sum, const Start& start, float* grads, const Apply& apply,
                               const AddGradient& add) {
  if (q_step_ && start && !mats_.empty()) return alternating_q_started(sum, start, grads, apply, add);
  float* out = send_p_.data();
  for (Compressed& c : mats_) {
    form_and_project_alternating(c, grads + c.m.offset, add);
    const FloatBuffer& made = q_step_ ? c.q_t : c.p_next;
    out = std::copy(made.data(), made.data() + made.size(), out);
  }
  pack_rest(grads, out);
  sum(send_p_.data(), std::size_t(out - send_p_.data()) + rest_floats_);
  const float* in = send_p_.data();
  for (Compressed& c : mats_) {  // the factors of M^, the same on every rank
    FloatBuffer& made = q_step_ ? c.q_t : c.p;
    std::copy(in, in + made.size(), made.data());
    in += made.size();
    if (q_step_)
      std::swap(c.p, c.p_next);  // P^
    else
      std::swap(c.q_t, c.q_next);  // Q^
  }
  unpack_rest(in, grads);
  for (Compressed& c : mats_)
    for (int j0 = 0; j0 < c.m.in; j0 += kSumColumns)
      decompress(c, j0, std::min(kSumColumns, c.m.in - j0), grads + c.m.offset, apply, [] {});
  end_alternating_step();
}

void PowerSgd::end_alternating_step() {
  for (Compressed& c : mats_) c.has_last = true;
  q_step_ = !q_step_;
  for (Compressed& c : mats_) prepare_alternating(c);
}

// Q's columns are summed kSumColumns at a time as the pass makes them (into send_p_, the rest of
// the buffer after them): at 1 Gbit/s a Q of the MNIST CNN at rank 1 is 0.7 ms of link, which
// the pass over the next columns hides. The same sums, element by element, as the one-sum form.
void PowerSgd::alternating_q_started(const Sum& sum, const Start& start, float* grads,
                                     const Apply& apply, const AddGradient& add) {
  std::vector<QPiece> pieces;
  float* at = send_p_.data();
  for (Compressed& c : mats_) {
    int from = 0;  // the first column not sent yet
    form_and_project_alternating(c, grads + c.m.offset, add, [&](int j0, int len) {
      test_pieces(pieces);
      if (j0 + len - from >= kSumColumns || j0 + len == c.m.in) {
        start_q_piece(pieces, c, from, j0 + len - from, at, start);
        from = j0 + len;
      }
    });
    std::swap(c.p, c.p_next);  // P^, the factor M^ = P^ Q^T takes
  }
  float* rest = send_p_.data() + q_floats_;
  pack_rest(grads, rest);
  if (rest_floats_ > 0) sum(rest, rest_floats_);
  unpack_rest(rest, grads);
  finish_q_pieces(pieces, grads, apply);
  end_alternating_step();
}

// A piece of columns at a time: M = G + E (E = the last M - the last M^ / ranks), then this
// piece's share of P = M Q^ (into p_next, from zero) or its columns of Q^T = P^^T M (into q_t,
// whose piece the error has just used); then made(j0, len), when given.
void PowerSgd::form_and_project_alternating(Compressed& c, const float* g, const AddGradient& add,
                                            const std::function<void(int j0, int len)>& made) {
  if (!q_step_) c.p_next.fill(0.0f);
  const float* m = c.m_last.data();
  form_pieces(c, g, add, [&](int j0, int len) {
    if (q_step_)
      kernels::cpu::lowrank_project_transposed(desc(c), m, c.p_next.data(), c.q_t.data(), j0, len);
    else
      kernels::cpu::lowrank_project_piece(desc(c), m, c.q_next.data(), c.p_next.data(), j0, len);
    if (made) made(j0, len);
  });
}

void PowerSgd::prepare_alternating(Compressed& c) const {
  if (q_step_) {
    std::copy(c.p.data(), c.p.data() + c.p.size(), c.p_next.data());
    orthonormalize_columns(c.p_next.data(), c.m.rows, rank_);
  } else {
    std::copy(c.q_t.data(), c.q_t.data() + c.q_t.size(), c.q_next.data());
    orthonormalize_rows(c.q_next.data(), rank_, c.m.in);
  }
}

std::string PowerSgd::summary() const {
  char text[160];
  std::snprintf(text, sizeof text, "%s rank %d: %zu %s, %.2f MB -> %.2f MB a step%s",
                alternate_ ? "alternating PowerSGD (ACP-SGD)" : "PowerSGD", rank_, mats_.size(),
                mats_.size() == 1 ? "matrix" : "matrices", 4e-6 * double(buffer_floats_),
                1e-6 * double(bytes_per_step()), alternate_ ? " (the mean of two)" : "");
  return text;
}

}  // namespace gpurun::runtime::cpu

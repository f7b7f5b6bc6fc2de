// powersgd.h (private): PowerSGD gradient compression for the allreduce exchange (Vogels,
// Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
// Optimization", NeurIPS 2019, Algorithms 1 and 2; PyTorch's powerSGD_hook does the same).
//
// Each compressed matrix M (a Dense layer's weight gradient, rows x in) is sent as two thin
// matrices instead of itself, with one step of power iteration warm-started from the last step's Q:
//     M += E                         error feedback: what earlier steps' compression left out
//     P  = M Q                       rows x r;   allreduce P (sums the ranks' P)
//     P  = orthonormalize(P)         Gram-Schmidt on its columns (the same bits on every rank)
//     Q  = M^T P                     in x r;     allreduce Q
//     M^ = P Q^T                     the rank-r approximation of the ranks' summed M
//     E  = M - M^ / ranks            this rank's share of what the approximation missed
// and the buffer then holds M^ where M was. E is not stored: the matrix keeps M, P and Q, and the
// next step forms E = M - P Q^T / ranks as it adds it (one pass over 11 MB less).
// Everything else in the buffer (convolutions, biases, the small Dense layers that would not
// shrink, the stat slots) travels whole, with P. So a step sends 4 (sum rows r + sum in r + rest)
// bytes instead of 4 x the whole buffer.
//
// Alternating (--grad-compression acp:R; ACP-SGD, Zhang, Zhang, Shi, Chu and Li, "Evaluation and
// Optimization of Gradient Compression for Distributed Deep Learning", ICDCS 2023): a step makes
// and sums only one of the two thin matrices, the other kept from the last step and
// orthonormalized first. Even steps: P = M Q^ (Q^ = the last Q, orthonormal), M^ = P Q^^T; odd
// steps: Q = M^T P^ (P^ = the last P, orthonormal), M^ = P^ Q^T. Either is the summed M
// projected on a rank-r subspace, so the error feedback is the same. A step then has one sum
// (the thin matrix and the rest of the buffer) and one pass over M, where PowerSGD has two of
// each: M is formed and projected a piece of columns at a time while the piece is in cache.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu/buffer.h"
#include "gpurun/kernels/lowrank.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime::cpu {

struct LowRankMatrix {
  std::size_t offset = 0;  // in the gradient buffer
  int rows = 0, in = 0;    // row-major, rows x in
  std::size_t id = 0;      // the caller's name for it (AddGradient gets it back)
};

// Where PowerSGD's M^ goes (PowerSgd::allreduce_sum).
struct PowerSgdApply {
  std::function<void(std::size_t offset, const float* piece, std::size_t n)> piece;
  float* into = nullptr;
  float scale = 0.0f;
};

class PowerSgd {
 public:
  // The matrices of `candidates` that shrink at least twofold at rank `rank` are compressed; the
  // rest of [0, buffer_floats) travels whole. Q starts the same on every rank (from `seed`).
  // With `alternate`, ACP-SGD (above).
  PowerSgd(const std::vector<LowRankMatrix>& candidates, std::size_t buffer_floats, int rank,
           int ranks, std::uint64_t seed, bool alternate = false);

  // Backward has made the gradients from buffer offset `from` on final (Model::GradReady): the
  // compressed rows among them take M += E and P = M Q now, while backward's block of them is
  // still in cache. allreduce_sum() does the rows no call covered.
  void rows_final(float* grads, std::size_t from);
  // Collective: the allreduce of `grads` (buffer_floats floats), compressed as above; `sum` is
  // the in-place sum over the ranks each of its messages (two, or one alternating) goes
  // through. Without `apply` M^ replaces M in the buffer. With it, the buffer's compressed
  // matrices keep this step's gradient and M^ goes to the optimizer a block of rows at a time,
  // while the block is in cache (no pass over a whole M^): with `apply.piece`,
  // piece(offset, M^'s floats, n) for buffer floats [offset, offset + n); with `apply.into`,
  // into[offset + i] += apply.scale * M^[i], made straight from P and Q (a plain SGD step,
  // scale -lr / ranks: no M^ is made at all). With `start` (a non-blocking sum), Q's sum goes
  // in pieces, each started once made, and M^ follows each piece's end: the link and the
  // passes over M overlap.
  using Sum = std::function<void(float*, std::size_t)>;
  using Apply = PowerSgdApply;
  using Start = std::function<std::unique_ptr<PendingSum>(float*, std::size_t)>;
  // With `add`, the compressed matrices' gradients are not in the buffer but deferred (Model::
  // forward_backward_deferred): add(m, lo, hi, into) adds columns [lo, hi) of matrix m's
  // gradient to `into` (m.rows x m.in, row-major), and PowerSGD forms M = G + E a piece of
  // columns at a time, each piece of G made into M while M's piece is in cache: G never
  // reaches memory. rows_final() has nothing to do then. Alternating, the same pieces (without
  // `add`, the buffer's G added a piece at a time), one sum with `sum`; `start` and rows_final()
  // are not used.
  using AddGradient = std::function<void(const LowRankMatrix& m, int lo, int hi, float* into)>;
  void allreduce_sum(const Sum& sum, float* grads, const Apply& apply = {},
                     const Start& start = {}, const AddGradient& add = {});
  // Whether the matrix at buffer offset `offset` is compressed (the others travel whole).
  bool compresses(std::size_t offset) const;
  // The parts of the buffer that travel whole, [begin, end), in order.
  const std::vector<std::pair<std::size_t, std::size_t>>& whole() const { return rest_; }

  // Alternating, the mean of a step that sends P and one that sends Q.
  std::size_t bytes_per_step() const {
    return alternate_ ? 4 * rest_floats_ + 2 * (p_floats_ + q_floats_)
                      : 4 * (p_floats_ + rest_floats_ + q_floats_);
  }
  std::size_t compressed_matrices() const { return mats_.size(); }
  std::string summary() const;  // "PowerSGD rank 4: 2 matrices, 11.08 MB -> 0.33 MB a step"

 private:
  struct Compressed {
    LowRankMatrix m;
    FloatBuffer q_t;        // r x in: Q transposed (the layout the dense kernels take as weights)
    FloatBuffer p;          // rows x r
    FloatBuffer m_last;     // rows x in: this step's M once formed, else the last step's
    int projected_from;     // rows from here on have had M += E, P = M Q this step
    bool has_last = false;  // whether m_last, p and q_t hold a last step (else E = 0)
    // rows x r: the deferred form's P while the last P is in use (alternating: the P being made,
    // or for a step that makes Q the last P orthonormalized).
    FloatBuffer p_next;
    FloatBuffer q_next;  // alternating, r x in: the last Q orthonormalized, for a step making P
  };
  static constexpr int kChunk = 1024;  // a piece of a row of M^ (or of Q^T's rows), in L1
  // Columns of Q^T a sum of Q carries: 96 kB at rank 4, the MNIST CNN's Q in four sums.
  static constexpr int kSumColumns = 6 * kChunk;
  static constexpr int kApplyRows = 16;  // rows of M^ a block: 384 kB of a sum's columns
  kernels::LowRankDesc desc(const Compressed& c) const { return {c.m.rows, c.m.in, rank_}; }
  float share() const { return 1.0f / float(ranks_); }  // this rank's share of the summed M^
  // For rows [lo, hi): M = G + E into m_last, E = the last M - the last M^ / ranks; P = M Q.
  void add_error_and_project(Compressed& c, const float* g, int lo, int hi) const;
  // M = G + E a piece of columns at a time, for all rows (E = the last M - the last M^ / ranks,
  // formed as it is added; G through `add`, else from g, the matrix in the buffer), each piece
  // handed to project(j0, len) while it is in cache.
  void form_pieces(Compressed& c, const float* g, const AddGradient& add,
                   const std::function<void(int j0, int len)>& project) const;
  // The deferred form of add_error_and_project, for all rows.
  void add_deferred_and_project(Compressed& c, const AddGradient& add);
  // Q's sum and M^, a piece of columns at a time (powersgd.cc).
  void exchange_q(const Sum& sum, const Start& start, float* grads, const Apply& apply);
  // A piece of Q^T's columns being summed: its rank rows packed at `at`, its sum (when started).
  struct QPiece {
    Compressed* c;
    int j0, len;
    float* at;
    std::unique_ptr<PendingSum> sum;
  };
  // Packs columns [j0, j0 + len) of c's Q^T at `at` (moved past them) and starts their sum when
  // `start` is given.
  void start_q_piece(std::vector<QPiece>& pieces, Compressed& c, int j0, int len, float*& at,
                     const Start& start) const;
  // As each piece's sum ends: its columns back into Q^T (M^'s, and the next step's), then M^'s
  // columns of it to grads or `apply`.
  void finish_q_pieces(std::vector<QPiece>& pieces, float* grads, const Apply& apply);
  // Open MPI moves a non-blocking sum only inside its calls: a test of each one under way.
  static void test_pieces(std::vector<QPiece>& pieces);
  // Columns [j0, j0 + len) of M^ into m (the buffer's matrix), or to `apply`, kApplyRows rows
  // at a time; progress() runs before each block.
  void decompress(Compressed& c, int j0, int len, float* m, const Apply& apply,
                  const std::function<void()>& progress);
  // ACP-SGD's step (allreduce_sum with `alternate`), and its one pass over a matrix: M = G + E
  // and this step's thin matrix, a piece of columns at a time.
  void alternating_sum(const Sum& sum, const Start& start, float* grads, const Apply& apply,
                       const AddGradient& add);
  // Its Q step with `start`: each piece of Q's columns summed as the pass makes it, while the
  // pass goes on; the rest of the buffer in one sum after.
  void alternating_q_started(const Sum& sum, const Start& start, float* grads, const Apply& apply,
                             const AddGradient& add);
  void form_and_project_alternating(Compressed& c, const float* g, const AddGradient& add,
                                    const std::function<void(int j0, int len)>& made = {});
  // After a step, the orthonormal factor the next one projects on (q_next or p_next).
  void prepare_alternating(Compressed& c) const;
  // The end of an alternating step: a last step exists, the other thin matrix is next.
  void end_alternating_step();
  void pack_rest(const float* grads, float* to) const;
  void unpack_rest(const float* from, float* grads) const;

  int rank_, ranks_;
  bool alternate_;
  bool q_step_ = false;  // alternating: this step makes Q (else P)
  std::size_t buffer_floats_;
  std::vector<Compressed> mats_;
  std::vector<std::pair<std::size_t, std::size_t>> rest_;  // [begin, end) sent whole
  std::size_t p_floats_ = 0, q_floats_ = 0, rest_floats_ = 0;
  FloatBuffer send_p_, send_q_;
  FloatBuffer block_;  // kApplyRows x kSumColumns: a block of M^ for apply.piece
};

// Modified Gram-Schmidt on the columns of p (rows x cols, row-major); a column with no length
// left after the ones before it becomes zero.
void orthonormalize_columns(float* p, int rows, int cols);
// The same on the rows of q (rows x cols, row-major): Q^T's rows are Q's columns.
void orthonormalize_rows(float* q, int rows, int cols);

}  // namespace gpurun::runtime::cpu

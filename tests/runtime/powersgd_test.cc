// powersgd_test.cc: PowerSGD (runtime/src/cpu/powersgd.h) on a buffer of known matrices, in one
// process (a single-rank group: its allreduce is the identity), and through the backend: what is
// compressed, what travels whole, the rank-r approximation, the error feedback, and the bytes.
#include "cpu/powersgd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gpurun/runtime/process_group.h"
#include "model/rng.h"

namespace gpurun::runtime::cpu {
namespace {

// A rows x in matrix of rank `rank`: the sum of `rank` random outer products.
std::vector<float> low_rank(int rows, int in, int rank, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> m(std::size_t(rows) * in, 0.0f);
  for (int k = 0; k < rank; ++k) {
    std::vector<float> u(rows), v(in);
    for (auto& x : u) x = rng.uniform(-1, 1);
    for (auto& x : v) x = rng.uniform(-1, 1);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < in; ++j) m[std::size_t(i) * in + j] += u[i] * v[j];
  }
  return m;
}

double max_abs_diff(const float* a, const float* b, std::size_t n) {
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

TEST(PowerSgd, ColumnsComeOutOrthonormal) {
  Rng rng(3);
  std::vector<float> p(50 * 4);
  for (auto& x : p) x = rng.uniform(-1, 1);
  orthonormalize_columns(p.data(), 50, 4);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      double dot = 0;
      for (int k = 0; k < 50; ++k) dot += double(p[k * 4 + a]) * p[k * 4 + b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << a << "," << b;
    }
}

// Layout: 7 floats whole, a 40 x 30 matrix of rank 2, 5 floats whole, a 4 x 3 matrix (too small
// to shrink at rank 2: sent whole), 3 floats whole.
struct Layout {
  static constexpr std::size_t kBig = 7, kSmall = 7 + 1200 + 5, kEnd = kSmall + 12 + 3;
  std::vector<LowRankMatrix> mats{{kBig, 40, 30}, {kSmall, 4, 3}};
};

// n floats uniform in [-1, 1).
std::vector<float> uniform_buffer(Rng& rng, std::size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(-1, 1);
  return v;
}

// A deferred call's buffer: the matrix's floats [at, at + floats) not there yet (garbage), as
// backward leaves them when it defers dW.
std::vector<float> without_matrix(std::vector<float> v, std::size_t at, std::size_t floats) {
  std::fill(v.begin() + at, v.begin() + at + floats, 1e30f);
  return v;
}

// A deferred call's `add`: G's columns [lo, hi) of each row, from g (the whole buffer's gradient).
PowerSgd::AddGradient add_from(const std::vector<float>& g) {
  return [&g](const LowRankMatrix& m, int lo, int hi, float* into) {
    for (int i = 0; i < m.rows; ++i)
      for (int j = lo; j < hi; ++j) into[i * m.in + j] += g[m.offset + std::size_t(i) * m.in + j];
  };
}

// Sums on one process that note the size of each sum, and of each started sum.
struct RecordedSums {
  std::unique_ptr<ProcessGroup> pg = make_single_process_group();
  std::vector<std::size_t> sums, starts;
  PowerSgd::Sum sum() {
    return [this](float* d, std::size_t n) {
      sums.push_back(n);
      pg->allreduce_sum(d, n);
    };
  }
  PowerSgd::Start start() {
    return [this](float* d, std::size_t n) {
      starts.push_back(n);
      return pg->start_allreduce_sum(d, n);
    };
  }
};

TEST(PowerSgd, ALowRankGradientComesThroughAndTheRestIsUntouched) {
  Layout l;
  std::vector<float> buf(Layout::kEnd);
  Rng rng(5);
  for (auto& x : buf) x = rng.uniform(-1, 1);
  const std::vector<float> m = low_rank(40, 30, 2, 11);
  std::copy(m.begin(), m.end(), buf.begin() + Layout::kBig);
  const std::vector<float> before = buf;
  PowerSgd psgd(l.mats, buf.size(), 2, 1, 99);
  EXPECT_EQ(psgd.compressed_matrices(), 1u);  // the 4 x 3 one would not shrink
  EXPECT_EQ(psgd.bytes_per_step(), 4 * (40 * 2 + 30 * 2 + (Layout::kEnd - 1200)));
  auto pg = make_single_process_group();
  psgd.allreduce_sum([&](float* d, std::size_t n) { pg->allreduce_sum(d, n); }, buf.data());
  // A rank-2 matrix at rank 2: one power iteration from a random Q recovers it.
  EXPECT_LT(max_abs_diff(buf.data() + Layout::kBig, m.data(), m.size()), 1e-4);
  // Everything outside the compressed matrix, the small matrix included, is as it was.
  EXPECT_EQ(max_abs_diff(buf.data(), before.data(), Layout::kBig), 0.0);
  EXPECT_EQ(max_abs_diff(buf.data() + Layout::kBig + 1200, before.data() + Layout::kBig + 1200,
                         Layout::kEnd - Layout::kBig - 1200),
            0.0);
}

// At rank 1 a rank-3 gradient loses something each step; the error feedback carries it into the
// next: after steps with a zero gradient, what was sent over all of them adds up to the first
// gradient far better than the first step alone did. Alternating too, in twice the steps (each
// step makes one factor).
class ErrorFeedback : public ::testing::TestWithParam<bool> {};

TEST_P(ErrorFeedback, CarriesWhatCompressionLeftOut) {
  Layout l;
  const std::vector<float> m = low_rank(40, 30, 3, 17);
  std::vector<float> buf(Layout::kEnd, 0.0f), sent(m.size(), 0.0f);
  const bool alternate = GetParam();
  PowerSgd psgd(l.mats, buf.size(), 1, 1, 99, alternate);
  auto pg = make_single_process_group();
  double first_miss = 0;
  for (int step = 0; step < (alternate ? 12 : 6); ++step) {
    std::fill(buf.begin(), buf.end(), 0.0f);
    if (step == 0) std::copy(m.begin(), m.end(), buf.begin() + Layout::kBig);
    psgd.allreduce_sum([&](float* d, std::size_t n) { pg->allreduce_sum(d, n); }, buf.data());
    for (std::size_t i = 0; i < m.size(); ++i) sent[i] += buf[Layout::kBig + i];
    if (step == 0) first_miss = max_abs_diff(sent.data(), m.data(), m.size());
  }
  EXPECT_GT(first_miss, 0.05);  // rank 1 of a rank-3 matrix misses a lot at first
  EXPECT_LT(max_abs_diff(sent.data(), m.data(), m.size()), first_miss / 10);
}

INSTANTIATE_TEST_SUITE_P(PowerSgd, ErrorFeedback, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Alternating" : "PowerSgd"; });

// Training's path through PowerSGD: rows made final early by backward's blocks (rows_final), Q
// summed in pieces started as each is made (start), and M^ handed to `apply` a piece at a time,
// gives the bits of the plain call, step after step (the error feedback included); every float of
// the matrix goes to `apply` once, and Q goes out in ceil(columns / 6144) sums.
TEST(PowerSgd, EarlyRowsPiecesOfQAndAppliedPiecesGiveTheSameBits) {
  constexpr int kRows = 40, kIn = 9000;
  constexpr std::size_t kAt = 5, kEnd = kAt + std::size_t(kRows) * kIn + 3;
  const std::vector<LowRankMatrix> mats{{kAt, kRows, kIn}};
  PowerSgd plain(mats, kEnd, 2, 1, 99), piecewise(mats, kEnd, 2, 1, 99);
  RecordedSums rec;
  const PowerSgd::Sum sum = rec.sum();
  const PowerSgd::Start start = rec.start();
  std::vector<std::size_t>& starts = rec.starts;
  Rng rng(21);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> a = uniform_buffer(rng, kEnd);
    std::vector<float> b = a, applied(kEnd, 0.0f);
    const std::vector<float> given = a;
    std::vector<int> times(kEnd, 0);
    plain.allreduce_sum(sum, a.data());
    // Rows not final yet hold garbage, as backward leaves them: rows 26.. (row 25 not whole),
    // then rows 10.., then all.
    const auto row = [&](int r) { return kAt + std::size_t(r) * kIn; };
    std::fill(b.begin() + row(0), b.begin() + row(26), 1e30f);
    piecewise.rows_final(b.data(), row(25) + 7);
    std::copy(given.begin() + row(10), given.begin() + row(26), b.begin() + row(10));
    piecewise.rows_final(b.data(), row(10));
    std::copy(given.begin() + row(0), given.begin() + row(10), b.begin() + row(0));
    starts.clear();
    piecewise.allreduce_sum(
        sum, b.data(),
        PowerSgd::Apply{[&](std::size_t at, const float* piece, std::size_t n) {
          for (std::size_t i = 0; i < n; ++i) {
            applied[at + i] = piece[i];
            ++times[at + i];
          }
        }},
        start);
    for (std::size_t i = kAt; i < kAt + std::size_t(kRows) * kIn; ++i) {
      ASSERT_EQ(times[i], 1) << "step " << step << " float " << i;
      ASSERT_EQ(applied[i], a[i]) << "step " << step << " float " << i;
    }
    EXPECT_EQ(times[0] + times[kEnd - 1], 0) << "the whole parts are not the optimizer's here";
    EXPECT_EQ(starts, (std::vector<std::size_t>{2 * 6144, 2 * (kIn - 6144)}));
  }
}

// A plain SGD step straight from P and Q (apply.into): the parameters take scale x M^, M^ as
// the plain call leaves it in the buffer, within rounding; the parts sent whole are the
// caller's, and the buffer keeps the gradient.
TEST(PowerSgd, APlainStepAddsTheScaledApproximationToTheParameters) {
  constexpr int kRows = 20, kIn = 7000;
  constexpr std::size_t kAt = 3, kEnd = kAt + std::size_t(kRows) * kIn + 4;
  const std::vector<LowRankMatrix> mats{{kAt, kRows, kIn}};
  PowerSgd plain(mats, kEnd, 2, 1, 5), stepped(mats, kEnd, 2, 1, 5);
  auto pg = make_single_process_group();
  const auto sum = [&](float* d, std::size_t n) { pg->allreduce_sum(d, n); };
  Rng rng(31);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> a(kEnd), params(kEnd);
    for (auto& x : a) x = rng.uniform(-1, 1);
    for (auto& x : params) x = rng.uniform(-1, 1);
    std::vector<float> b = a;
    const std::vector<float> before = params, given = b;
    plain.allreduce_sum(sum, a.data());
    stepped.allreduce_sum(sum, b.data(), PowerSgd::Apply{{}, params.data(), -0.25f});
    EXPECT_EQ(b, given);
    for (std::size_t i = kAt; i < kAt + std::size_t(kRows) * kIn; ++i)
      ASSERT_NEAR(params[i], before[i] - 0.25f * a[i], 1e-5f) << "step " << step << " float " << i;
    EXPECT_EQ(params[0], before[0]);
    EXPECT_EQ(params[kEnd - 1], before[kEnd - 1]);
  }
}

// The deferred form (Model::forward_backward_deferred): G is not in the buffer, and PowerSGD adds
// it into M a piece of columns at a time through `add`. Over several steps, error feedback
// included, it sends what the plain call sends, within rounding (P's dot products are summed a
// piece at a time); `add` sees every column of the matrix once a step.
TEST(PowerSgd, TheDeferredGradientGivesThePlainResult) {
  constexpr int kRows = 12, kIn = 3000;
  constexpr std::size_t kAt = 5, kEnd = kAt + std::size_t(kRows) * kIn + 3;
  const std::vector<LowRankMatrix> mats{{kAt, kRows, kIn}};
  PowerSgd plain(mats, kEnd, 2, 1, 99), deferred(mats, kEnd, 2, 1, 99);
  EXPECT_TRUE(deferred.compresses(kAt));
  EXPECT_FALSE(deferred.compresses(0));
  auto pg = make_single_process_group();
  const auto sum = [&](float* d, std::size_t n) { pg->allreduce_sum(d, n); };
  Rng rng(23);
  for (int step = 0; step < 4; ++step) {
    std::vector<float> a = uniform_buffer(rng, kEnd);
    const std::vector<float> g = a;
    std::vector<float> b = without_matrix(a, kAt, std::size_t(kRows) * kIn), sent(kEnd, 0.0f);
    std::vector<int> cols(kIn, 0);
    plain.allreduce_sum(sum, a.data());
    deferred.allreduce_sum(
        sum, b.data(),
        PowerSgd::Apply{[&](std::size_t at, const float* piece, std::size_t n) {
          std::copy(piece, piece + n, sent.begin() + at);
        }},
        {},
        [&](const LowRankMatrix& m, int lo, int hi, float* into) {
          ASSERT_EQ(m.offset, kAt);
          add_from(g)(m, lo, hi, into);
          for (int j = lo; j < hi; ++j) ++cols[j];
        });
    EXPECT_EQ(std::count(cols.begin(), cols.end(), 1), kIn) << "step " << step;
    EXPECT_LT(max_abs_diff(sent.data() + kAt, a.data() + kAt, std::size_t(kRows) * kIn), 1e-4)
        << "step " << step;
  }
}

// Alternating (ACP-SGD): a step makes one thin matrix and sums once. A rank-2 gradient at rank
// 2: the first step (P = M Q^) finds M's column space, so the second (Q = M^T P^) sends all of
// what it is given, the error included: over two steps of the same gradient the two sent add up
// to twice it. The sums alternate between P and the rest, and Q and the rest.
TEST(PowerSgd, AlternatingSendsOneThinMatrixAStepAndCatchesUpInTwo) {
  Layout l;
  const std::vector<float> m = low_rank(40, 30, 2, 11);
  std::vector<float> buf(Layout::kEnd), sent(m.size(), 0.0f);
  PowerSgd acp(l.mats, buf.size(), 2, 1, 99, true);
  const std::size_t rest = Layout::kEnd - 1200;
  EXPECT_EQ(acp.bytes_per_step(), 4 * rest + 2 * (40 * 2 + 30 * 2));  // the mean of two steps
  auto pg = make_single_process_group();
  std::vector<std::size_t> sums;
  const auto sum = [&](float* d, std::size_t n) {
    sums.push_back(n);
    pg->allreduce_sum(d, n);
  };
  Rng rng(5);
  for (int step = 0; step < 2; ++step) {
    for (auto& x : buf) x = rng.uniform(-1, 1);
    std::copy(m.begin(), m.end(), buf.begin() + Layout::kBig);
    const std::vector<float> before = buf;
    acp.allreduce_sum(sum, buf.data());
    for (std::size_t i = 0; i < m.size(); ++i) sent[i] += buf[Layout::kBig + i];
    EXPECT_EQ(max_abs_diff(buf.data(), before.data(), Layout::kBig), 0.0);
    EXPECT_EQ(max_abs_diff(buf.data() + Layout::kBig + 1200, before.data() + Layout::kBig + 1200,
                           Layout::kEnd - Layout::kBig - 1200),
              0.0);
    if (step == 0) {
      EXPECT_GT(max_abs_diff(sent.data(), m.data(), m.size()), 0.05);
    }
  }
  std::vector<float> twice(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) twice[i] = 2 * m[i];
  EXPECT_LT(max_abs_diff(sent.data(), twice.data(), m.size()), 1e-4);
  EXPECT_EQ(sums, (std::vector<std::size_t>{40 * 2 + rest, 30 * 2 + rest}));
}

// Alternating, training's deferred form (G added a piece at a time through `add`) and the plain
// call (G in the buffer) make the same bits, step after step; a plain SGD step straight from P and
// Q (apply.into) adds scale x what the plain call leaves in the buffer, within rounding.
TEST(PowerSgd, AlternatingDeferredAndAppliedGiveThePlainResult) {
  constexpr int kRows = 12, kIn = 9000;
  constexpr std::size_t kAt = 5, kEnd = kAt + std::size_t(kRows) * kIn + 3;
  const std::vector<LowRankMatrix> mats{{kAt, kRows, kIn}};
  PowerSgd plain(mats, kEnd, 2, 1, 99, true), deferred(mats, kEnd, 2, 1, 99, true),
      stepped(mats, kEnd, 2, 1, 99, true);
  auto pg = make_single_process_group();
  const auto sum = [&](float* d, std::size_t n) { pg->allreduce_sum(d, n); };
  Rng rng(23);
  for (int step = 0; step < 4; ++step) {
    std::vector<float> a(kEnd), params(kEnd);
    for (auto& x : a) x = rng.uniform(-1, 1);
    for (auto& x : params) x = rng.uniform(-1, 1);
    const std::vector<float> g = a, before = params;
    std::vector<float> b = without_matrix(a, kAt, std::size_t(kRows) * kIn), c = a, sent(kEnd, 0.0f);
    plain.allreduce_sum(sum, a.data());
    const PowerSgd::AddGradient add = add_from(g);
    deferred.allreduce_sum(
        sum, b.data(),
        PowerSgd::Apply{[&](std::size_t at, const float* piece, std::size_t n) {
          std::copy(piece, piece + n, sent.begin() + at);
        }},
        {}, add);
    stepped.allreduce_sum(sum, c.data(), PowerSgd::Apply{{}, params.data(), -0.25f});
    for (std::size_t i = kAt; i < kAt + std::size_t(kRows) * kIn; ++i) {
      ASSERT_EQ(sent[i], a[i]) << "step " << step << " float " << i;
      ASSERT_NEAR(params[i], before[i] - 0.25f * a[i], 1e-5f) << "step " << step << " float " << i;
    }
    EXPECT_EQ(c, g) << "with apply the buffer keeps the gradient";
  }
}

// Alternating as training calls it (G through `add`, M^ to `apply`, non-blocking sums): a step
// making Q starts its sum a piece of 6,144 columns at a time as the pass makes them, and sums the
// rest of the buffer after; a step making P sums once. The same bits as the plain call.
TEST(PowerSgd, AlternatingQStepsSumTheirPiecesAsTheyAreMade) {
  constexpr int kRows = 12, kIn = 9000;
  constexpr std::size_t kAt = 5, kEnd = kAt + std::size_t(kRows) * kIn + 3;
  const std::vector<LowRankMatrix> mats{{kAt, kRows, kIn}};
  PowerSgd plain(mats, kEnd, 2, 1, 99, true), started(mats, kEnd, 2, 1, 99, true);
  RecordedSums rec;
  auto& pg = rec.pg;
  std::vector<std::size_t>& sums = rec.sums;
  std::vector<std::size_t>& starts = rec.starts;
  const PowerSgd::Sum sum = rec.sum();
  const PowerSgd::Start start = rec.start();
  Rng rng(29);
  for (int step = 0; step < 4; ++step) {
    std::vector<float> a = uniform_buffer(rng, kEnd);
    const std::vector<float> g = a;
    std::vector<float> b = without_matrix(a, kAt, std::size_t(kRows) * kIn), sent(kEnd, 0.0f);
    plain.allreduce_sum([&](float* d, std::size_t n) { pg->allreduce_sum(d, n); }, a.data());
    const PowerSgd::AddGradient add = add_from(g);
    sums.clear();
    starts.clear();
    started.allreduce_sum(
        sum, b.data(),
        PowerSgd::Apply{[&](std::size_t at, const float* piece, std::size_t n) {
          std::copy(piece, piece + n, sent.begin() + at);
        }},
        start, add);
    for (std::size_t i = kAt; i < kAt + std::size_t(kRows) * kIn; ++i)
      ASSERT_EQ(sent[i], a[i]) << "step " << step << " float " << i;
    EXPECT_EQ(b[0], a[0]) << "step " << step;
    EXPECT_EQ(b[kEnd - 1], a[kEnd - 1]) << "step " << step;
    if (step % 2 == 0) {  // P: 12 x 2 floats and the rest, in one sum
      EXPECT_EQ(sums, (std::vector<std::size_t>{24 + 8})) << "step " << step;
      EXPECT_TRUE(starts.empty()) << "step " << step;
    } else {
      EXPECT_EQ(sums, (std::vector<std::size_t>{8})) << "step " << step;
      EXPECT_EQ(starts, (std::vector<std::size_t>{2 * 6144, 2 * (kIn - 6144)})) << "step " << step;
    }
  }
}

double dot(const float* a, const float* b, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return s;
}

// Alternating against its definition, over two ranks (a sum that doubles: two ranks with the same
// gradient) and two matrices, one of three pieces of columns. Each step, what is sent for a matrix
// is the orthogonal projection of the ranks' summed M = G + E on a rank-r subspace: its residual
// is orthogonal to it (<S - M^, M^> = 0), and it is neither 0 nor S. The test keeps E itself,
// E = M - M^ / 2: a wrong share, a wrong order of the pieces or of the matrices, or a stale
// factor breaks the projection of the next step.
TEST(PowerSgd, AlternatingSendsAProjectionOfTheSummedMEachStep) {
  constexpr std::size_t kA = 3, kB = kA + 20 * 2500 + 4, kEnd = kB + 40 * 30 + 2;
  const std::vector<LowRankMatrix> mats{{kB, 40, 30}, {kA, 20, 2500}};  // any order
  PowerSgd acp(mats, kEnd, 1, 2, 7, true);
  EXPECT_EQ(acp.compressed_matrices(), 2u);
  const auto twice = [](float* d, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) d[i] *= 2.0f;
  };
  std::vector<std::vector<float>> kept(2);  // M, for the next step's E
  std::vector<std::vector<float>> sent_last(2);
  Rng rng(41);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> buf(kEnd);
    for (auto& x : buf) x = rng.uniform(-0.1f, 0.1f);
    const std::vector<float> given = buf;
    acp.allreduce_sum(twice, buf.data());
    for (int k = 0; k < 2; ++k) {
      const LowRankMatrix& m = mats[k];
      const std::size_t n = std::size_t(m.rows) * m.in;
      std::vector<float> big(n), s(n), resid(n);
      for (std::size_t i = 0; i < n; ++i) {
        const float e = step == 0 ? 0.0f : kept[k][i] - 0.5f * sent_last[k][i];
        big[i] = given[m.offset + i] + e;
        s[i] = 2.0f * big[i];
        resid[i] = s[i] - buf[m.offset + i];
      }
      const float* hat = buf.data() + m.offset;
      const double ss = dot(s.data(), s.data(), n), hh = dot(hat, hat, n);
      const std::string at = "step " + std::to_string(step) + " matrix " + std::to_string(k);
      EXPECT_LT(std::fabs(dot(resid.data(), hat, n)), 1e-4 * ss) << at;
      EXPECT_GT(hh, 1e-4 * ss) << at;
      EXPECT_GT(dot(resid.data(), resid.data(), n), 1e-2 * ss) << at;
      kept[k] = big;
      sent_last[k].assign(hat, hat + n);
    }
    for (std::size_t i = 0; i < kA; ++i) ASSERT_EQ(buf[i], 2.0f * given[i]);  // the rest, summed
    ASSERT_EQ(buf[kEnd - 1], 2.0f * given[kEnd - 1]);
  }
}

}  // namespace
}  // namespace gpurun::runtime::cpu

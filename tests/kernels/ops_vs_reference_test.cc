// ops_vs_reference_test.cc: every cpu:: op against its ref:: oracle on several shapes (strides,
// padding, odd sizes, the MNIST CNN's own shapes), plus the ops' documented edge cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "gpurun/kernels/accuracy.h"
#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/dense.h"
#include "gpurun/kernels/lowrank.h"
#include "gpurun/kernels/sgd.h"
#include "gpurun/kernels/softmax_xent.h"
#include "gpurun/kernels/threads.h"
#include "test_util.h"

namespace gpurun::kernels {
namespace {

using testing::all_close;
using testing::random_vec;

struct ConvCase {
  int batch, in_c, in_h, in_w, out_c, k, stride, pad;
};

class ConvVsRef : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvVsRef, ForwardAndBothBackwardsMatch) {
  const ConvCase c = GetParam();
  Conv2dDesc d;
  d.batch = c.batch;
  d.in_c = c.in_c;
  d.in_h = c.in_h;
  d.in_w = c.in_w;
  d.out_c = c.out_c;
  d.k_h = d.k_w = c.k;
  d.stride = c.stride;
  d.pad = c.pad;
  const auto x = random_vec(d.x_floats(), 1), w = random_vec(d.w_floats(), 2);
  const auto dy = random_vec(d.y_floats(), 3);
  std::vector<float> ws(cpu::conv2d_workspace_floats(d));
  const Workspace W{ws.data(), ws.size()};

  std::vector<float> y(d.y_floats()), y_ref(d.y_floats());
  cpu::conv2d_forward(d, x.data(), w.data(), y.data(), W);
  ref::conv2d_forward(d, x.data(), w.data(), y_ref.data());
  EXPECT_TRUE(all_close(y, y_ref, 1e-5f, 1e-4f));

  std::vector<float> dw(d.w_floats(), 7.0f), dw_ref(d.w_floats(), 7.0f);
  cpu::conv2d_backward_weights(d, x.data(), dy.data(), dw.data(), W);
  ref::conv2d_backward_weights(d, x.data(), dy.data(), dw_ref.data());
  EXPECT_TRUE(all_close(dw, dw_ref, 1e-4f, 1e-4f));

  // Accumulate adds to what is there.
  std::vector<float> acc(d.w_floats(), 1.0f), acc_ref(d.w_floats());
  cpu::conv2d_backward_weights(d, x.data(), dy.data(), acc.data(), W, Accumulate::kAdd);
  for (std::size_t i = 0; i < acc_ref.size(); ++i) acc_ref[i] = dw_ref[i] + 1.0f;
  EXPECT_TRUE(all_close(acc, acc_ref, 1e-4f, 1e-4f));

  std::vector<float> dx(d.x_floats(), 5.0f), dx_ref(d.x_floats());
  cpu::conv2d_backward_data(d, w.data(), dy.data(), dx.data(), W);
  ref::conv2d_backward_data(d, w.data(), dy.data(), dx_ref.data());
  EXPECT_TRUE(all_close(dx, dx_ref, 1e-5f, 1e-4f));

  // Convolution + bias + ReLU in one call (one oneDNN primitive, or the two ops), and the same
  // again: bitwise the same (a run repeats bit for bit).
  const auto b = random_vec(std::size_t(d.out_c), 4);
  std::vector<float> fused(d.y_floats(), 3.0f), again(d.y_floats(), -3.0f);
  cpu::conv2d_bias_act_forward(d, Activation::kRelu, x.data(), w.data(), b.data(), fused.data(), W);
  cpu::conv2d_bias_act_forward(d, Activation::kRelu, x.data(), w.data(), b.data(), again.data(), W);
  ref::bias_act_forward({d.batch, d.out_c, d.out_h() * d.out_w(), Activation::kRelu}, y_ref.data(),
                        b.data());
  EXPECT_TRUE(all_close(fused, y_ref, 1e-5f, 1e-4f));
  EXPECT_EQ(fused, again) << "the same call gave different bits";

  // Its backward to the weights and the bias (a first layer): the ReLU mask, db and dw as the
  // reference's bias_act_backward and conv2d_backward_weights give them, overwritten or added.
  const BiasActDesc bd{d.batch, d.out_c, d.out_h() * d.out_w(), Activation::kRelu};
  std::vector<float> masked = dy, db_ref(d.out_c), bw_ref(d.w_floats());
  ref::bias_act_backward(bd, fused.data(), masked.data(), db_ref.data());
  ref::conv2d_backward_weights(d, x.data(), masked.data(), bw_ref.data());
  for (const Accumulate mode : {Accumulate::kOverwrite, Accumulate::kAdd}) {
    const float base = mode == Accumulate::kAdd ? 2.0f : -9.0f;
    std::vector<float> g = dy, bw(d.w_floats(), base), db(d.out_c, base);
    cpu::conv2d_bias_act_backward_weights(d, Activation::kRelu, x.data(), fused.data(), g.data(),
                                          bw.data(), db.data(), W, mode);
    std::vector<float> bw_want = bw_ref, db_want = db_ref;
    if (mode == Accumulate::kAdd) {
      for (float& v : bw_want) v += base;
      for (float& v : db_want) v += base;
    }
    EXPECT_TRUE(all_close(bw, bw_want, 1e-4f, 1e-4f)) << "dw, mode " << int(mode);
    EXPECT_TRUE(all_close(db, db_want, 1e-4f, 1e-4f)) << "db, mode " << int(mode);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvVsRef,
    ::testing::Values(ConvCase{2, 1, 28, 28, 32, 3, 1, 0},  // MNIST CNN
                      ConvCase{3, 2, 7, 9, 4, 3, 1, 1}, ConvCase{2, 3, 8, 8, 5, 3, 2, 0},
                      ConvCase{1, 2, 6, 5, 3, 2, 2, 1}, ConvCase{4, 1, 5, 5, 1, 5, 1, 0},
                      // single-channel shapes oneDNN's build takes to the
                      // direct kernels (conv2d_direct.h): LeNet's first
                      // layer, rows of exactly 16, of 17 and of 28 columns
                      ConvCase{3, 1, 28, 28, 20, 5, 1, 0}, ConvCase{2, 1, 18, 18, 3, 3, 1, 0},
                      ConvCase{2, 1, 10, 21, 4, 5, 1, 0}, ConvCase{5, 1, 9, 30, 7, 3, 1, 0}));

TEST(ConvVsRef, RejectsBadShapesAndSmallWorkspace) {
  Conv2dDesc d;
  d.batch = 1;
  d.in_c = 1;
  d.in_h = d.in_w = 2;
  d.out_c = 1;
  d.k_h = d.k_w = 3;
  EXPECT_THROW(validate(d), std::invalid_argument);  // kernel larger than the input
  d.in_h = d.in_w = 4;
  std::vector<float> x(16), w(9), y(4), ws(1);
  EXPECT_THROW(cpu::conv2d_forward(d, x.data(), w.data(), y.data(), {ws.data(), ws.size()}),
               std::invalid_argument);
}

struct DenseCase {
  int batch, in, out;
};
class DenseVsRef : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DenseVsRef, ForwardAndBackwardsMatch) {
  const DenseCase c = GetParam();
  const DenseDesc d{c.batch, c.in, c.out};
  const auto x = random_vec(std::size_t(c.batch) * c.in, 11);
  const auto w = random_vec(std::size_t(c.out) * c.in, 12);
  const auto dy = random_vec(std::size_t(c.batch) * c.out, 13);
  std::vector<float> y(std::size_t(c.batch) * c.out), y_ref(y.size());
  cpu::dense_forward(d, x.data(), w.data(), y.data());
  ref::dense_forward(d, x.data(), w.data(), y_ref.data());
  EXPECT_TRUE(all_close(y, y_ref, 1e-4f, 1e-4f));
  std::vector<float> dw(w.size()), dw_ref(w.size());
  cpu::dense_backward_weights(d, x.data(), dy.data(), dw.data());
  ref::dense_backward_weights(d, x.data(), dy.data(), dw_ref.data());
  EXPECT_TRUE(all_close(dw, dw_ref, 1e-4f, 1e-4f));
  std::vector<float> dx(x.size()), dx_ref(x.size());
  cpu::dense_backward_data(d, w.data(), dy.data(), dx.data());
  ref::dense_backward_data(d, w.data(), dy.data(), dx_ref.data());
  EXPECT_TRUE(all_close(dx, dx_ref, 1e-4f, 1e-4f));
}

TEST_P(DenseVsRef, WeightColsMatch) {
  // Columns [lo, hi) of dW (beta 0) and of the fused update w += alpha * dW (beta 1); columns
  // outside the range must not be touched.
  const DenseCase c = GetParam();
  const DenseDesc d{c.batch, c.in, c.out};
  const auto x = random_vec(std::size_t(c.batch) * c.in, 14);
  const auto dy = random_vec(std::size_t(c.batch) * c.out, 15);
  const auto w0 = random_vec(std::size_t(c.out) * c.in, 16);
  const int lo = c.in / 3, hi = c.in - c.in / 4;
  for (float beta : {0.0f, 1.0f}) {
    const float alpha = beta == 0.0f ? 1.0f : -0.2f;
    std::vector<float> got = w0, want = w0;
    cpu::dense_weight_cols(d, x.data(), dy.data(), lo, hi, alpha, beta, got.data());
    ref::dense_weight_cols(d, x.data(), dy.data(), lo, hi, alpha, beta, want.data());
    EXPECT_TRUE(all_close(got, want, 1e-4f, 1e-4f)) << "beta " << beta;
    std::vector<float> again = w0;  // a run repeats bit for bit
    cpu::dense_weight_cols(d, x.data(), dy.data(), lo, hi, alpha, beta, again.data());
    EXPECT_EQ(got, again) << "beta " << beta << ": the same call gave different bits";
    for (std::size_t i = 0; i < got.size(); ++i) {
      const int col = int(i % std::size_t(c.in));
      if (col < lo || col >= hi) {
        ASSERT_EQ(got[i], w0[i]) << "column " << col << " written";
      }
    }
  }
  // The whole matrix at beta 0 is dense_backward_weights.
  std::vector<float> dw(w0.size()), cols(w0.size());
  cpu::dense_backward_weights(d, x.data(), dy.data(), dw.data());
  cpu::dense_weight_cols(d, x.data(), dy.data(), 0, c.in, 1.0f, 0.0f, cols.data());
  EXPECT_EQ(dw, cols);
  std::vector<float> any(w0.size());
  EXPECT_THROW(cpu::dense_weight_cols(d, x.data(), dy.data(), 0, c.in + 1, 1, 0, any.data()),
               std::invalid_argument);
}

TEST_P(DenseVsRef, ColumnProductsMatch) {
  // A layer split by columns between ranks: each forms y's partial sum over its inputs and dx's
  // columns of its inputs; the partial sums add up to the whole product.
  const DenseCase c = GetParam();
  const DenseDesc d{c.batch, c.in, c.out};
  const auto x = random_vec(std::size_t(c.batch) * c.in, 17);
  const auto w = random_vec(std::size_t(c.out) * c.in, 18);
  const auto dy = random_vec(std::size_t(c.batch) * c.out, 19);
  const int mid = c.in / 2;
  std::vector<float> lo_part(std::size_t(c.batch) * c.out), hi_part(lo_part.size());
  std::vector<float> want(lo_part.size()), whole(lo_part.size());
  cpu::dense_forward_cols(d, x.data(), w.data(), 0, mid, lo_part.data());
  ref::dense_forward_cols(d, x.data(), w.data(), 0, mid, want.data());
  EXPECT_TRUE(all_close(lo_part, want, 1e-4f, 1e-4f));
  cpu::dense_forward_cols(d, x.data(), w.data(), mid, c.in, hi_part.data());
  ref::dense_forward(d, x.data(), w.data(), whole.data());
  for (std::size_t i = 0; i < whole.size(); ++i) lo_part[i] += hi_part[i];
  EXPECT_TRUE(all_close(lo_part, whole, 1e-4f, 1e-4f)) << "the halves do not add up to x w^T";

  const float untouched = 12345.0f;
  std::vector<float> dx(x.size(), untouched), dx_ref(x.size(), untouched);
  cpu::dense_backward_data_cols(d, w.data(), dy.data(), mid, c.in, dx.data());
  ref::dense_backward_data_cols(d, w.data(), dy.data(), mid, c.in, dx_ref.data());
  EXPECT_TRUE(all_close(dx, dx_ref, 1e-4f, 1e-4f));
  for (std::size_t i = 0; i < dx.size(); ++i) {
    const int col = int(i % std::size_t(c.in));
    if (col < mid) {
      ASSERT_EQ(dx[i], untouched) << "column " << col << " written";
    }
  }
  cpu::dense_backward_data_cols(d, w.data(), dy.data(), 0, mid, dx.data());
  std::vector<float> dx_whole(x.size());
  cpu::dense_backward_data(d, w.data(), dy.data(), dx_whole.data());
  EXPECT_TRUE(all_close(dx, dx_whole, 1e-5f, 1e-5f)) << "the halves do not make dy w";
  std::vector<float> any(x.size());
  EXPECT_THROW(cpu::dense_forward_cols(d, x.data(), w.data(), mid, c.in + 1, any.data()),
               std::invalid_argument);
  EXPECT_THROW(cpu::dense_backward_data_cols(d, w.data(), dy.data(), -1, mid, any.data()),
               std::invalid_argument);
}

TEST_P(DenseVsRef, WeightRowsAreThoseRowsOfTheWholeGradient) {
  // The overlapped allreduce computes dW a block of rows at a time and sends each block as it is
  // done: every row must be what the whole product gives, and no other row is touched. Within
  // rounding, not bit for bit: on AMD Zen (AVX2) oneDNN's and OpenBLAS's sgemm sum a block of 3
  // rows in another order than all of them (1 ulp apart), where on the Intel AVX-512 machines
  // measured before they did not.
  const DenseCase c = GetParam();
  const DenseDesc d{c.batch, c.in, c.out};
  const auto x = random_vec(std::size_t(c.batch) * c.in, 21);
  const auto dy = random_vec(std::size_t(c.batch) * c.out, 22);
  std::vector<float> whole(std::size_t(c.out) * c.in), want(whole.size());
  cpu::dense_backward_weights(d, x.data(), dy.data(), whole.data());
  ref::dense_backward_weights(d, x.data(), dy.data(), want.data());
  const float untouched = 12345.0f;
  std::vector<float> rows(whole.size(), untouched), rows_ref(whole.size(), untouched);
  const int mid = c.out / 2;
  cpu::dense_backward_weights_rows(d, x.data(), dy.data(), mid, c.out, rows.data());
  ref::dense_backward_weights_rows(d, x.data(), dy.data(), mid, c.out, rows_ref.data());
  for (std::size_t i = 0; i < std::size_t(mid) * c.in; ++i) ASSERT_EQ(rows[i], untouched) << i;
  EXPECT_TRUE(all_close(rows, rows_ref, 1e-4f, 1e-4f));
  for (std::size_t i = std::size_t(mid) * c.in; i < want.size(); ++i)
    ASSERT_EQ(rows_ref[i], want[i]) << "ref's rows are not ref's whole product at " << i;
  for (int lo = 0; lo < mid; lo += 3)  // the rest in blocks of 3, from the top down
    cpu::dense_backward_weights_rows(d, x.data(), dy.data(), lo, std::min(lo + 3, mid),
                                     rows.data());
  EXPECT_TRUE(all_close(rows, whole, 1e-6f, 1e-5f))
      << "rows in blocks differ from the whole product";
  cpu::dense_backward_weights_rows(d, x.data(), dy.data(), 0, c.out, rows.data(),
                                   Accumulate::kAdd);
  for (std::size_t i = 0; i < whole.size(); ++i)  // a library may fuse the add (BLIS does)
    ASSERT_NEAR(rows[i], 2 * whole[i], 1e-5f * (1 + std::fabs(whole[i]))) << i;
  std::vector<float> any(whole.size());
  EXPECT_THROW(cpu::dense_backward_weights_rows(d, x.data(), dy.data(), 0, c.out + 1, any.data()),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DenseVsRef,
                         ::testing::Values(DenseCase{1, 1, 1}, DenseCase{3, 17, 5},
                                           DenseCase{64, 128, 10}, DenseCase{8, 2163, 128},
                                           DenseCase{7, 300, 33}));

TEST(DenseVsRef, SameResultWithTwoBlasThreads) {
  cpu::set_num_threads(2);
  const DenseDesc d{64, 4096, 128};
  const auto x = random_vec(std::size_t(d.batch) * d.in, 21),
             w = random_vec(std::size_t(d.out) * d.in, 22);
  std::vector<float> y(std::size_t(d.batch) * d.out), y_ref(y.size());
  cpu::dense_forward(d, x.data(), w.data(), y.data());
  ref::dense_forward(d, x.data(), w.data(), y_ref.data());
  EXPECT_TRUE(all_close(y, y_ref, 1e-3f, 1e-4f));
  cpu::set_num_threads(1);
  EXPECT_EQ(cpu::num_threads(), 1);
  EXPECT_THROW(cpu::set_num_threads(0), std::invalid_argument);
}

TEST(BiasActVsRef, ReluAndIdentityMatch) {
  for (Activation act : {Activation::kRelu, Activation::kNone}) {
    const BiasActDesc d{5, 7, 13, act};
    const auto b = random_vec(7, 31);
    auto y = random_vec(d.floats(), 32), y_ref = y;
    cpu::bias_act_forward(d, y.data(), b.data());
    ref::bias_act_forward(d, y_ref.data(), b.data());
    EXPECT_TRUE(all_close(y, y_ref, 0.0f, 0.0f));
    if (act == Activation::kRelu) {
      for (float v : y) EXPECT_GE(v, 0.0f);
    }
    auto dy = random_vec(d.floats(), 33), dy_ref = dy;
    std::vector<float> db(7), db_ref(7);
    cpu::bias_act_backward(d, y.data(), dy.data(), db.data());
    ref::bias_act_backward(d, y_ref.data(), dy_ref.data(), db_ref.data());
    EXPECT_TRUE(all_close(dy, dy_ref, 0.0f, 0.0f));
    EXPECT_TRUE(all_close(db, db_ref, 1e-5f, 1e-5f));
    // Accumulate adds the batch's sum to what db holds.
    std::vector<float> db_acc(7, 2.0f), want(7);
    auto dy2 = random_vec(d.floats(), 33);
    cpu::bias_act_backward(d, y.data(), dy2.data(), db_acc.data(), Accumulate::kAdd);
    for (int c = 0; c < 7; ++c) want[c] = db_ref[c] + 2.0f;
    EXPECT_TRUE(all_close(db_acc, want, 1e-5f, 1e-5f));
  }
}

TEST(SoftmaxXentVsRef, MatchesAndIsStableForHugeLogits) {
  const SoftmaxXentDesc d{6, 10, 1.0f / 6};
  auto z = random_vec(60, 41, -5, 5);
  z[3] = 1e30f;  // would overflow a naive exp
  z[15] = -1e30f;
  const std::vector<std::int32_t> labels = {3, 5, 0, 9, 1, 2};
  std::vector<float> g(60), g_ref(60);
  float loss = 0, loss_ref = 0;
  cpu::softmax_xent(d, z.data(), labels.data(), g.data(), &loss);
  ref::softmax_xent(d, z.data(), labels.data(), g_ref.data(), &loss_ref);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, loss_ref, 1e-4f * std::fabs(loss_ref) + 1e-4f);
  EXPECT_TRUE(all_close(g, g_ref, 1e-6f, 1e-5f));
  // Each row of the gradient sums to zero (softmax sums to one, minus the one-hot).
  for (int n = 0; n < 6; ++n) {
    double s = 0;
    for (int c = 0; c < 10; ++c) s += g[n * 10 + c];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
  // In-place (dlogits aliasing logits) gives the same gradient.
  auto inplace = z;
  float loss2 = 0;
  cpu::softmax_xent(d, inplace.data(), labels.data(), inplace.data(), &loss2);
  EXPECT_TRUE(all_close(inplace, g, 0.0f, 0.0f));
}

TEST(SoftmaxXentVsRef, UniformLogitsGiveLogClasses) {
  const SoftmaxXentDesc d{2, 10, 1.0f};
  std::vector<float> z(20, 0.5f), g(20);
  const std::vector<std::int32_t> labels = {0, 7};
  float loss = 0;
  cpu::softmax_xent(d, z.data(), labels.data(), g.data(), &loss);
  EXPECT_NEAR(loss, 2 * std::log(10.0), 1e-5);
}

TEST(SoftmaxXentVsRef, LabelOutOfRangeThrowsNamingPosition) {
  const SoftmaxXentDesc d{2, 3, 1.0f};
  std::vector<float> z(6), g(6);
  const std::vector<std::int32_t> labels = {0, 3};
  float loss = 0;
  try {
    cpu::softmax_xent(d, z.data(), labels.data(), g.data(), &loss);
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
  }
}

TEST(SgdVsRef, PlainMomentumAndWeightDecayMatch) {
  for (float m : {0.0f, 0.9f}) {
    for (float wd : {0.0f, 1e-3f}) {
      SgdDesc d;
      d.n = 1000;
      d.lr = 0.1f;
      d.momentum = m;
      d.weight_decay = wd;
      d.grad_scale = 0.5f;
      auto p = random_vec(1000, 51), p_ref = p;
      const auto g = random_vec(1000, 52);
      std::vector<float> v(1000), v_ref(1000);
      for (int step = 0; step < 3; ++step) {
        cpu::sgd_step(d, p.data(), g.data(), m != 0 ? v.data() : nullptr);
        ref::sgd_step(d, p_ref.data(), g.data(), m != 0 ? v_ref.data() : nullptr);
      }
      EXPECT_TRUE(all_close(p, p_ref, 1e-6f, 1e-5f)) << "momentum " << m << " wd " << wd;
    }
  }
  // One hand-computed step: p = 1, g = 2, scale 0.5, wd 0.1, lr 0.1, momentum 0.9, v = 0:
  // g' = 1 + 0.1 = 1.1, v = 1.1, p = 1 - 0.11 = 0.89.
  SgdDesc d;
  d.n = 1;
  d.lr = 0.1f;
  d.momentum = 0.9f;
  d.weight_decay = 0.1f;
  d.grad_scale = 0.5f;
  float p = 1.0f, g = 2.0f, v = 0.0f;
  cpu::sgd_step(d, &p, &g, &v);
  EXPECT_FLOAT_EQ(v, 1.1f);
  EXPECT_FLOAT_EQ(p, 0.89f);
  EXPECT_THROW(cpu::sgd_step(d, &p, &g, nullptr), std::invalid_argument);
}

// The passes of PowerSGD (lowrank.h) against the formulas, in double, on odd shapes (rows not a
// multiple of four, columns of no power of two, ranks that take groups of four, two and one
// terms) and the MNIST CNN's Dense matrix at rank 4.
class LowRankVsRef : public ::testing::TestWithParam<LowRankDesc> {
 protected:
  // c (n x m) = sum over l of a(i, l) b(l, j), in double.
  static std::vector<float> product(int n, int inner, int m,
                                    const std::function<double(int, int)>& a,
                                    const std::function<double(int, int)>& b) {
    std::vector<float> c(std::size_t(n) * m);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) {
        double s = 0;
        for (int l = 0; l < inner; ++l) s += a(i, l) * b(l, j);
        c[std::size_t(i) * m + j] = float(s);
      }
    return c;
  }
  void SetUp() override {
    d = GetParam();
    const std::size_t n = std::size_t(d.rows) * d.cols;
    g = random_vec(n, 11);
    m0 = random_vec(n, 12);
    p0 = random_vec(std::size_t(d.rows) * d.rank, 13);
    q_t = random_vec(std::size_t(d.rank) * d.cols, 14);
    const std::vector<float> pq = product(d.rows, d.rank, d.cols, at(p0, d.rank), at(q_t, d.cols));
    m_ref.resize(n);
    for (std::size_t i = 0; i < n; ++i) m_ref[i] = float(g[i] + (m0[i] - share * double(pq[i])));
    p_ref = product(d.rows, d.cols, d.rank, at(m_ref, d.cols), at_t(q_t, d.cols));
  }
  // Element (i, j) of a row-major matrix of `cols` columns, and of its transpose.
  static std::function<double(int, int)> at(const std::vector<float>& v, int cols) {
    return [&v, cols](int i, int j) { return double(v[std::size_t(i) * cols + j]); };
  }
  static std::function<double(int, int)> at_t(const std::vector<float>& v, int cols) {
    return [&v, cols](int i, int j) { return double(v[std::size_t(j) * cols + i]); };
  }

  LowRankDesc d;
  const float share = 0.5f;
  std::vector<float> g, m0, p0, q_t, m_ref, p_ref;  // m_ref = g + (m0 - share p0 q^T), p = m q
};

// m = g + (m - share p q^T), then p = m q: rows [2, rows) first, then [0, 2), as backward's
// blocks come from the last; without a last step, m = g.
TEST_P(LowRankVsRef, AddAndProjectByRows) {
  std::vector<float> m = m0, p = p0;
  cpu::lowrank_add_and_project(d, g.data(), m.data(), p.data(), q_t.data(), share, true, 2, d.rows);
  cpu::lowrank_add_and_project(d, g.data(), m.data(), p.data(), q_t.data(), share, true, 0, 2);
  EXPECT_TRUE(all_close(m, m_ref, 1e-5f, 1e-5f));
  EXPECT_TRUE(all_close(p, p_ref, 1e-3f, 1e-4f));
  std::vector<float> fresh = m0;
  cpu::lowrank_add_and_project(d, g.data(), fresh.data(), p.data(), q_t.data(), share, false, 0,
                               d.rows);
  EXPECT_EQ(fresh, g);
}

// The same a piece of columns at a time, the gradient added between (a deferred dW).
TEST_P(LowRankVsRef, SubtractAndProjectByPieces) {
  std::vector<float> m = m0, p_next(p0.size(), 0.0f);
  for (int col = 0; col < d.cols; col += 1000) {
    const int len = std::min(1000, d.cols - col);
    cpu::lowrank_product(d, p0.data(), q_t.data(), 0, d.rows, col, len, -share, true,
                         m.data() + col, d.cols);
    for (int i = 0; i < d.rows; ++i)
      for (int j = col; j < col + len; ++j) m[i * d.cols + j] += g[i * d.cols + j];
    cpu::lowrank_project_piece(d, m.data(), q_t.data(), p_next.data(), col, len);
  }
  EXPECT_TRUE(all_close(m, m_ref, 1e-5f, 1e-5f));
  EXPECT_TRUE(all_close(p_next, p_ref, 1e-3f, 1e-4f));
}

// q_t = p^T m in two pieces of columns; a block of p q^T into a buffer of its own, and added,
// scaled, to a block of a matrix.
TEST_P(LowRankVsRef, ProjectTransposedAndApproximate) {
  std::vector<float> q(q_t.size(), 9.0f);
  const int half = d.cols / 2 + 3;
  cpu::lowrank_project_transposed(d, m_ref.data(), p0.data(), q.data(), 0, half);
  cpu::lowrank_project_transposed(d, m_ref.data(), p0.data(), q.data(), half, d.cols - half);
  EXPECT_TRUE(all_close(q, product(d.rank, d.rows, d.cols, at_t(p0, d.rank), at(m_ref, d.cols)),
                        1e-4f, 1e-4f));
  const std::vector<float> pq = product(d.rows, d.rank, d.cols, at(p0, d.rank), at(q_t, d.cols));
  const int rows = 3, col = d.cols - 100, len = 100, row0 = d.rows - rows;
  std::vector<float> block(std::size_t(rows) * len, 7.0f), want_block, m = m0;
  cpu::lowrank_product(d, p0.data(), q_t.data(), row0, rows, col, len, 1.0f, false,
                       block.data(), len);
  cpu::lowrank_product(d, p0.data(), q_t.data(), row0, rows, col, len, -0.5f, true,
                       m.data() + std::size_t(row0) * d.cols + col, d.cols);
  for (int i = row0; i < d.rows; ++i)
    for (int j = col; j < col + len; ++j) {
      const std::size_t k = std::size_t(i) * d.cols + j;
      want_block.push_back(pq[k]);
      EXPECT_NEAR(m[k], m0[k] - 0.5f * pq[k], 1e-5f) << i << ", " << j;
    }
  EXPECT_TRUE(all_close(block, want_block, 1e-5f, 1e-5f));
  EXPECT_EQ(m[0], m0[0]) << "outside the block";
  EXPECT_EQ(m[std::size_t(row0) * d.cols + col - 1], m0[std::size_t(row0) * d.cols + col - 1]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LowRankVsRef,
                         ::testing::Values(LowRankDesc{7, 2500, 3}, LowRankDesc{9, 300, 7},
                                           LowRankDesc{128, 21632, 4}));

TEST(AccuracyVsRef, CountsArgmaxWithFirstMaxWinningTies) {
  const AccuracyDesc d{4, 3};
  const std::vector<float> z = {1, 5, 2, /**/ 3, 3, 0, /**/ 0, 0, 9, /**/ 7, 1, 1};
  const std::vector<std::int32_t> labels = {1, 1, 2, 0};  // row 1 ties: arg-max is 0, a miss
  std::int64_t c = -1, c_ref = -1;
  cpu::accuracy_count(d, z.data(), labels.data(), &c);
  ref::accuracy_count(d, z.data(), labels.data(), &c_ref);
  EXPECT_EQ(c, 3);
  EXPECT_EQ(c_ref, 3);
}

}  // namespace
}  // namespace gpurun::kernels

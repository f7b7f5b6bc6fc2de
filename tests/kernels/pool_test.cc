// pool_test.cc: max pooling's cpu:: op against the ref:: oracle (overlapping and odd windows),
// its tie rule (the first maximum in row-major order takes the gradient), its gradient against
// finite differences, shape refusals; and bias_act without a bias (the ReLU layer).
#include <gtest/gtest.h>

#include <vector>

#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/pool2d.h"
#include "test_util.h"

namespace gpurun::kernels {
namespace {

using testing::all_close;
using testing::random_vec;

struct PoolCase {
  int batch, channels, in_h, in_w, size, stride;
};

class PoolVsRef : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolVsRef, ForwardAndBackwardMatch) {
  const PoolCase c = GetParam();
  const Pool2dDesc d{c.batch, c.channels, c.in_h, c.in_w, c.size, c.stride};
  const auto x = random_vec(d.x_floats(), 4), dy = random_vec(d.y_floats(), 5);
  std::vector<float> y(d.y_floats()), y_ref(d.y_floats());
  cpu::max_pool2d_forward(d, x.data(), y.data());
  ref::max_pool2d_forward(d, x.data(), y_ref.data());
  EXPECT_EQ(y, y_ref);  // a max does not round: bitwise
  std::vector<float> dx(d.x_floats(), 9.0f), dx_ref(d.x_floats(), -9.0f);
  cpu::max_pool2d_backward(d, x.data(), dy.data(), dx.data());
  ref::max_pool2d_backward(d, x.data(), dy.data(), dx_ref.data());
  EXPECT_EQ(dx, dx_ref);   // same sums in the same order
  double in = 0, out = 0;  // every output's gradient lands somewhere, once
  for (float v : dx) in += v;
  for (float v : dy) out += v;
  EXPECT_NEAR(in, out, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolVsRef,
                         ::testing::Values(PoolCase{2, 3, 8, 8, 2, 2},    // LeNet's kind
                                           PoolCase{3, 6, 24, 24, 2, 2},  // LeNet's first pool
                                           PoolCase{1, 2, 7, 9, 2, 2},    // odd: last row dropped
                                           PoolCase{2, 2, 7, 7, 3, 2},    // overlapping windows
                                           PoolCase{1, 1, 5, 5, 3, 1},    // heavy overlap
                                           PoolCase{1, 4, 4, 4, 4, 4}));  // global max

TEST(MaxPool, TiesGoToTheFirstMaximumInRowMajorOrder) {
  const Pool2dDesc d{1, 1, 2, 4, 2, 2};
  const std::vector<float> x = {1, 5, 7, 7,   // window 0 has its max 5 once; window 1 ties 7, 7
                                5, 2, 7, 7};  // ... and window 0 ties 5 at (0,1) and (1,0)
  std::vector<float> y(2), dx(8);
  cpu::max_pool2d_forward(d, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{5, 7}));
  const std::vector<float> dy = {10, 20};
  cpu::max_pool2d_backward(d, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0, 10, 20, 0, 0, 0, 0, 0}));
  ref::max_pool2d_backward(d, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0, 10, 20, 0, 0, 0, 0, 0}));
}

TEST(MaxPool, GradientMatchesFiniteDifferences) {
  const Pool2dDesc d{2, 2, 6, 6, 3, 2};
  auto x = random_vec(d.x_floats(), 6);
  const auto w = random_vec(d.y_floats(), 7);  // loss = sum(w * y)
  std::vector<float> y(d.y_floats()), dx(d.x_floats());
  cpu::max_pool2d_backward(d, x.data(), w.data(), dx.data());
  auto loss = [&] {
    cpu::max_pool2d_forward(d, x.data(), y.data());
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += double(w[i]) * y[i];
    return s;
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + 1e-3f;
    const double up = loss();
    x[i] = keep - 1e-3f;
    const double down = loss();
    x[i] = keep;
    EXPECT_NEAR(dx[i], (up - down) / 2e-3, 1e-2) << "input " << i;
  }
}

TEST(MaxPool, RefusesWindowsThatDoNotFit) {
  std::vector<float> buf(64);
  EXPECT_THROW(cpu::max_pool2d_forward({1, 1, 2, 2, 3, 3}, buf.data(), buf.data()),
               std::invalid_argument);
  EXPECT_THROW(cpu::max_pool2d_forward({1, 1, 4, 4, 2, 0}, buf.data(), buf.data()),
               std::invalid_argument);
  EXPECT_THROW(ref::max_pool2d_forward({0, 1, 4, 4, 2, 2}, buf.data(), buf.data()),
               std::invalid_argument);
}

TEST(BiasAct, NoBiasIsAPlainActivation) {
  const BiasActDesc d{3, 1, 40, Activation::kRelu};
  const auto x = random_vec(d.floats(), 8);
  std::vector<float> y = x, y_ref = x;
  cpu::bias_act_forward(d, y.data(), nullptr);
  ref::bias_act_forward(d, y_ref.data(), nullptr);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f) << i;
    EXPECT_EQ(y_ref[i], y[i]) << i;
  }
  std::vector<float> same = x;  // no bias, no activation: nothing to do
  cpu::bias_act_forward({3, 1, 40, Activation::kNone}, same.data(), nullptr);
  EXPECT_EQ(same, x);
}

}  // namespace
}  // namespace gpurun::kernels

// gradient_check_test.cc: finite-difference checks of every layer's backward. The scalar checked
// is L = sum(r * f(...)) for a fixed random r, so dL/dy = r; central differences in double over
// a sample of coordinates must match the analytic gradients of both ref:: and cpu::.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/dense.h"
#include "gpurun/kernels/softmax_xent.h"
#include "test_util.h"

namespace gpurun::kernels {
namespace {

using testing::random_vec;

// Loss as a function of a vector (evaluated in float ops, summed in double).
using LossFn = std::function<double(const std::vector<float>&)>;

// Checks analytic[i] against (L(v + h e_i) - L(v - h e_i)) / 2h on every stride-th coordinate.
void check_gradient(const char* what, const LossFn& loss, std::vector<float> v,
                    const std::vector<float>& analytic, std::size_t stride = 1, double h = 1e-2,
                    double tol = 2e-2) {
  ASSERT_EQ(v.size(), analytic.size());
  std::size_t checked = 0, bad = 0;
  for (std::size_t i = 0; i < v.size(); i += stride) {
    const float keep = v[i];
    v[i] = float(keep + h);
    const double up = loss(v);
    v[i] = float(keep - h);
    const double down = loss(v);
    v[i] = keep;
    const double numeric = (up - down) / (2 * h);
    const double err = std::fabs(numeric - analytic[i]);
    if (err > tol * (1.0 + std::fabs(numeric))) {
      if (bad < 5)
        ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " numeric "
                      << numeric;
      ++bad;
    }
    ++checked;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << checked << " coordinates differ";
  EXPECT_GT(checked, 0u);
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

TEST(GradientCheck, Conv2dWeightsAndInput) {
  Conv2dDesc d;
  d.batch = 2;
  d.in_c = 2;
  d.in_h = 6;
  d.in_w = 5;
  d.out_c = 3;
  d.k_h = d.k_w = 3;
  d.pad = 1;
  d.stride = 1;
  const auto x = random_vec(d.x_floats(), 1), w = random_vec(d.w_floats(), 2);
  const auto r = random_vec(d.y_floats(), 3);
  std::vector<float> ws(cpu::conv2d_workspace_floats(d));
  const Workspace W{ws.data(), ws.size()};
  auto loss_w = [&](const std::vector<float>& wv) {
    std::vector<float> y(d.y_floats());
    ref::conv2d_forward(d, x.data(), wv.data(), y.data());
    return dot(y, r);
  };
  auto loss_x = [&](const std::vector<float>& xv) {
    std::vector<float> y(d.y_floats());
    ref::conv2d_forward(d, xv.data(), w.data(), y.data());
    return dot(y, r);
  };
  std::vector<float> dw(d.w_floats()), dx(d.x_floats());
  ref::conv2d_backward_weights(d, x.data(), r.data(), dw.data());
  ref::conv2d_backward_data(d, w.data(), r.data(), dx.data());
  check_gradient("ref conv dw", loss_w, w, dw);
  check_gradient("ref conv dx", loss_x, x, dx);
  cpu::conv2d_backward_weights(d, x.data(), r.data(), dw.data(), W);
  cpu::conv2d_backward_data(d, w.data(), r.data(), dx.data(), W);
  check_gradient("cpu conv dw", loss_w, w, dw);
  check_gradient("cpu conv dx", loss_x, x, dx);
}

TEST(GradientCheck, DenseWeightsAndInput) {
  const DenseDesc d{3, 20, 7};
  const auto x = random_vec(60, 4), w = random_vec(140, 5), r = random_vec(21, 6);
  auto loss_w = [&](const std::vector<float>& wv) {
    std::vector<float> y(21);
    ref::dense_forward(d, x.data(), wv.data(), y.data());
    return dot(y, r);
  };
  auto loss_x = [&](const std::vector<float>& xv) {
    std::vector<float> y(21);
    ref::dense_forward(d, xv.data(), w.data(), y.data());
    return dot(y, r);
  };
  std::vector<float> dw(140), dx(60);
  cpu::dense_backward_weights(d, x.data(), r.data(), dw.data());
  cpu::dense_backward_data(d, w.data(), r.data(), dx.data());
  check_gradient("cpu dense dw", loss_w, w, dw);
  check_gradient("cpu dense dx", loss_x, x, dx);
}

TEST(GradientCheck, BiasReluInputAndBias) {
  const BiasActDesc d{3, 4, 5, Activation::kRelu};
  // Keep inputs away from the ReLU kink, where the derivative does not exist.
  auto x = random_vec(d.floats(), 7);
  for (auto& v : x) v = v >= 0 ? v + 0.1f : v - 0.1f;
  const std::vector<float> b(4, 0.0f);
  const auto r = random_vec(d.floats(), 8);
  auto loss_x = [&](const std::vector<float>& xv) {
    auto y = xv;
    ref::bias_act_forward(d, y.data(), b.data());
    return dot(y, r);
  };
  auto loss_b = [&](const std::vector<float>& bv) {
    auto y = x;
    ref::bias_act_forward(d, y.data(), bv.data());
    return dot(y, r);
  };
  auto y = x;
  cpu::bias_act_forward(d, y.data(), b.data());
  auto dy = r;
  std::vector<float> db(4);
  cpu::bias_act_backward(d, y.data(), dy.data(), db.data());
  check_gradient("cpu bias_relu dx", loss_x, x, dy, 1, 1e-2);
  check_gradient("cpu bias_relu db", loss_b, b, db, 1, 1e-3);
}

TEST(GradientCheck, SoftmaxCrossEntropyLogits) {
  const SoftmaxXentDesc d{4, 10, 1.0f};
  const auto z = random_vec(40, 9, -3, 3);
  const std::vector<std::int32_t> labels = {0, 9, 4, 4};
  auto loss = [&](const std::vector<float>& zv) {
    std::vector<float> g(40);
    float l = 0;
    ref::softmax_xent(d, zv.data(), labels.data(), g.data(), &l);
    return double(l);
  };
  std::vector<float> g(40);
  float l = 0;
  cpu::softmax_xent(d, z.data(), labels.data(), g.data(), &l);
  check_gradient("cpu softmax_xent dz", loss, z, g, 1, 1e-2, 1e-2);
}

}  // namespace
}  // namespace gpurun::kernels

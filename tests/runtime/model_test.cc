// model_test.cc: the MNIST CNN's parameter count and flat-buffer layout, a finite-difference check
// of the whole model's gradient, that SGD steps lower the loss, the LR schedule, checkpoints
// (round trip, atomic replace, corruption detected) and the one-rank process group.
#include "cpu/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include "gpurun/kernels/sgd.h"
#include "train/checkpoint.h"
#include "gpurun/runtime/process_group.h"
#include "model/rng.h"
#include "gpurun/runtime/trainer.h"
#include "test_models.h"

namespace gpurun::runtime {
namespace {

using testing::lenet_spec;
using testing::make_model;
using testing::mnist_cnn_spec;

TEST(Model, MnistCnnHasTheBenchmarksParameterCount) {
  auto m = make_model(mnist_cnn_spec(), 64);
  EXPECT_EQ(m->param_count(), 2770634u);
  EXPECT_GE(m->param_floats(), m->param_count());
  EXPECT_EQ(m->grad_buffer_floats(), m->param_floats() + kStatSlots);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m->params()) % 64, 0u);
}

TEST(Model, InitIsDeterministicAndGlorotBounded) {
  auto a = make_model(mnist_cnn_spec(), 8), b = make_model(mnist_cnn_spec(), 8);
  a->init(5);
  b->init(5);
  EXPECT_EQ(0, std::memcmp(a->params(), b->params(), a->param_floats() * sizeof(float)));
  b->init(6);
  EXPECT_NE(0, std::memcmp(a->params(), b->params(), a->param_floats() * sizeof(float)));
  float mx = 0;
  for (std::size_t i = 0; i < a->param_floats(); ++i) mx = std::max(mx, std::fabs(a->params()[i]));
  // Dense(128 -> 10) has the largest limit, sqrt(6 / 138) = 0.2085.
  EXPECT_LE(mx, std::sqrt(6.0f / (128 + 10)) + 1e-6f);
  EXPECT_GT(mx, 0.9f * std::sqrt(6.0f / (128 + 10)));
  EXPECT_GT(mx, 0.0f);
}

// A small network of the same kind, so a finite-difference check over all parameters is cheap.
std::unique_ptr<Model> small_model() {
  ModelSpec net({1, 6, 6});
  net.add(conv2d(3, 3, Activation::kRelu)).add(dense(5, Activation::kRelu)).add(dense(4));
  return make_model(net, 3);
}

// Central differences of the mean loss against the backward pass, over every parameter of m
// (3 images of input x, labels y).
void expect_gradient_matches_finite_differences(Model& m, const std::vector<float>& x,
                                                const std::vector<std::int32_t>& y) {
  m.init(3);
  const int n = int(y.size());
  m.forward_backward(n, x.data(), y.data());
  const std::vector<float> grad(m.grads(), m.grads() + m.param_floats());
  auto loss = [&]() { return m.evaluate(n, x.data(), y.data()).loss_sum / n; };
  std::size_t checked = 0;
  for (std::size_t i = 0; i < m.param_floats(); ++i) {
    float& p = m.params()[i];
    const float keep = p;
    p = keep + 1e-3f;
    const double up = loss();
    p = keep - 1e-3f;
    const double down = loss();
    p = keep;
    const double numeric = (up - down) / 2e-3;
    EXPECT_NEAR(grad[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << "parameter " << i;
    ++checked;
  }
  EXPECT_GT(checked, 100u);
}

std::vector<float> random_images(std::size_t floats, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(floats);
  for (auto& v : x) v = rng.uniform(0, 1);
  return x;
}

TEST(Model, WholeModelGradientMatchesFiniteDifferences) {
  auto m = small_model();
  expect_gradient_matches_finite_differences(*m, random_images(3 * 36, 11), {0, 3, 2});
}

TEST(Model, PoolingReluFlattenGradientMatchesFiniteDifferences) {
  // Every layer kind LeNet uses, small: conv -> max pool -> conv -> ReLU -> flatten -> dense.
  ModelSpec net({1, 10, 10});
  net.add(conv2d(3, 3, Activation::kRelu))
      .add(max_pool2d(2))
      .add(conv2d(4, 2))
      .add(relu())
      .add(flatten())
      .add(dense(5, Activation::kRelu))
      .add(dense(4));
  auto m = make_model(net, 3);
  expect_gradient_matches_finite_differences(*m, random_images(3 * 100, 12), {1, 0, 3});
}

TEST(ModelSpec, WorksOutShapesAndTheFlatLayout) {
  const ModelSpec net = lenet_spec();
  const std::vector<Shape> out = {{6, 24, 24}, {6, 12, 12}, {16, 8, 8}, {16, 4, 4},
                                  {256, 1, 1}, {120, 1, 1}, {84, 1, 1}, {10, 1, 1}};
  ASSERT_EQ(net.layers().size(), out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(net.layers()[i].output, out[i]) << "layer " << i << " " << net.layers()[i].name();
  }
  EXPECT_EQ(net.param_count(), 44426u);  // 156 + 2416 + 30840 + 10164 + 850
  std::size_t at = 0;
  for (std::size_t i = 0; i < net.layers().size(); ++i) {
    const ParamSlice& s = net.params_of(i);
    EXPECT_EQ(s.offset, at) << "layer " << i;
    EXPECT_EQ(s.offset % kParamAlign, 0u);
    EXPECT_EQ(s.bias % kParamAlign, 0u);
    EXPECT_GE(s.bias - s.weights, net.layers()[i].weight_floats());
    at += s.floats;
  }
  EXPECT_EQ(at, net.param_floats());
  EXPECT_EQ(mnist_cnn_spec().param_count(), 2770634u);
}

// The step's FLOP as the benchmarks quote them (bench/results/cpu_mnist.md: 17.4 MFLOP per MNIST
// CNN image, forward 5.93 and backward 11.47), worked out from the layer list.
TEST(ModelSpec, CountsTheTrainingStepsFlop) {
  // conv 32x(1x3x3) at 26x26, dense 21632 -> 128 -> 10: forward 2 x 2,964,864 multiply-adds;
  // backward the same for the weights plus both dense layers' input gradients.
  EXPECT_EQ(mnist_cnn_spec().train_flops_per_example(), 17399808.0);
  // LeNet: conv 6x(1x5x5) at 24x24, conv 16x(6x5x5) at 8x8, dense 256-120-84-10 (pooling and
  // flatten cost nothing here); every layer but the first forms its input gradient.
  EXPECT_EQ(lenet_spec().train_flops_per_example(), 1517040.0);
  EXPECT_EQ(ModelSpec({1, 4, 4}).train_flops_per_example(), 0.0);
}

TEST(ModelSpec, RefusesLayersThatDoNotFitNamingThem) {
  ModelSpec net({1, 4, 4});
  try {
    net.add(conv2d(8, 5));
    FAIL() << "a 5x5 kernel on a 4x4 input was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 (conv2d) on input 1x4x4"), std::string::npos)
        << e.what();
  }
  net.add(conv2d(2, 3));
  EXPECT_THROW(net.add(max_pool2d(3)), std::invalid_argument);
  EXPECT_THROW(net.add(dense(0)), std::invalid_argument);
  EXPECT_THROW(ModelSpec({0, 28, 28}), std::invalid_argument);
  EXPECT_EQ(net.layers().size(), 1u) << "a refused layer must not be added";
}

TEST(ModelSpec, InitIsTheSameForTheSameSeed) {
  const ModelSpec net = lenet_spec();
  std::vector<float> a(net.param_floats()), b(net.param_floats()), c(net.param_floats());
  net.init_params(9, a.data());
  net.init_params(9, b.data());
  net.init_params(10, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Biases start at zero.
  const ParamSlice& s = net.params_of(0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a[s.bias + std::size_t(i)], 0.0f);
}

TEST(Model, SgdStepsLowerTheLossOnAFixedBatch) {
  auto m = make_model(mnist_cnn_spec(), 16);
  m->init(1);
  Rng rng(2);
  std::vector<float> x(16 * 784);
  for (auto& v : x) v = rng.uniform(0, 1);
  std::vector<std::int32_t> y(16);
  for (int i = 0; i < 16; ++i) y[i] = i % 10;
  kernels::SgdDesc sd;
  sd.n = m->param_floats();
  sd.lr = 0.05f;
  const double first = m->forward_backward(16, x.data(), y.data()).loss_sum;
  EXPECT_NEAR(m->stats()[kLossSum], first, 1e-3);
  for (int s = 0; s < 20; ++s) {
    kernels::cpu::sgd_step(sd, m->params(), m->grads(), nullptr);
    m->forward_backward(16, x.data(), y.data());
  }
  EXPECT_LT(m->evaluate(16, x.data(), y.data()).loss_sum, 0.5 * first);
  EXPECT_THROW(m->forward_backward(17, x.data(), y.data()), std::invalid_argument);
}

// Largest |p - p0| over the parameters, p0 being a fresh init(seed) of the same network.
double max_diff_from_init(Model& m, std::uint64_t seed) {
  std::vector<float> now(m.params(), m.params() + m.param_floats());
  m.init(seed);
  double d = 0;
  for (std::size_t i = 0; i < now.size(); ++i)
    d = std::max(d, double(std::fabs(now[i] - m.params()[i])));
  std::copy(now.begin(), now.end(), m.params());
  return d;
}

// DeferredPeers of one member that, with `split`, splits every splittable deferred layer into
// two halves of its columns, as two members of the shared exchange would: the
// forward's product as the sum of two partial products, dX as two halves of its columns.
// It records each release with the X and dZ seen at that moment.
class HalvesPeers final : public DeferredPeers {
 public:
  HalvesPeers(Model& m, bool split, std::vector<std::vector<float>>& xs,
              const std::vector<std::vector<float>>& dzs, std::vector<std::vector<float>>& dxs)
      : m_(m), split_(split), xs_(xs), dzs_(dzs), dxs_(dxs) {}
  bool split(std::size_t k) const override { return split_ && m_.splittable(k); }
  void forward(std::size_t k, float* z) override {
    const auto& d = m_.deferred()[k];
    std::vector<float> second(16 * std::size_t(d.rows));
    m_.deferred_product_cols(k, 16, xs_[k].data(), 0, d.in / 2, z);
    m_.deferred_product_cols(k, 16, xs_[k].data(), d.in / 2, d.in, second.data());
    for (std::size_t i = 0; i < second.size(); ++i) z[i] += second[i];
    ++forwards;
  }
  void backward_data(std::size_t k) override {
    const int in = m_.deferred()[k].in;
    m_.deferred_input_grad_cols(k, 16, dzs_[k].data(), in / 2, in, dxs_[k].data());
    m_.deferred_input_grad_cols(k, 16, dzs_[k].data(), 0, in / 2, dxs_[k].data());
    ++backwards;
  }
  void released() override {
    ++releases;
    xs_then = xs_;
    dzs_then = dzs_;
  }
  // A convolution first layer with the split Dense layer right after it splits too: its output
  // in two halves of whole channels; its gradient from all channels at once (each call
  // overwrites the layer's whole gradient).
  bool split_first() const override {
    return split_ && m_.first_layer_unit() > 0 && m_.deferred()[0].layer == 1;
  }
  void forward_first() override {
    const int in = m_.deferred()[0].in,
              half = in / m_.first_layer_unit() / 2 * m_.first_layer_unit();
    m_.first_forward_cols(16, input.data(), half, in, xs_[0].data());
    m_.first_forward_cols(16, input.data(), 0, half, xs_[0].data());
    ++first_forwards;
  }
  void backward_first() override {
    m_.first_backward_cols(16, input.data(), xs_[0].data(), dxs_[0].data(), 0, m_.deferred()[0].in);
    ++first_backwards;
  }

  int forwards = 0, backwards = 0, releases = 0, first_forwards = 0, first_backwards = 0;
  std::vector<std::vector<float>> xs_then, dzs_then;
  std::vector<float> input;  // bound with Model::bind_input when the first layer splits

 private:
  Model& m_;
  bool split_;
  std::vector<std::vector<float>>& xs_;
  const std::vector<std::vector<float>>& dzs_;
  std::vector<std::vector<float>>& dxs_;
};

// Two identical models: one takes the full gradient + SGD, the other defers the Dense layers'
// dW and forms it as two halves of the columns: one half fused into the weights
// (w += -lr dZ^T X), the other as dW columns + SGD; the rest by SGD over undeferred_ranges().
// The peers' release runs once per step, with every deferred layer's X and dZ final. With
// `split`, the deferred layers after the first run their products through the peers, in halves.
void expect_deferred_matches_gradient_then_sgd(const std::function<std::unique_ptr<Model>()>& make,
                                               std::size_t deferred_layers, bool split) {
  SCOPED_TRACE(split ? "split by columns" : "whole");
  auto a = make(), b = make();
  a->init(4);
  b->init(4);
  Rng rng(5);
  std::vector<float> x(16 * 784);
  for (auto& v : x) v = rng.uniform(0, 1);
  std::vector<std::int32_t> y(16);
  for (int i = 0; i < 16; ++i) y[i] = (3 * i) % 10;
  const float lr = 0.2f;
  ASSERT_EQ(b->deferred().size(), deferred_layers);
  // b's X and dZ in caller memory, as the trainer's shared arena holds them.
  std::vector<std::vector<float>> xs, dzs, dxs;
  std::size_t split_layers = 0;
  HalvesPeers peers(*b, split, xs, dzs, dxs);
  for (std::size_t k = 0; k < b->deferred().size(); ++k) {
    xs.emplace_back(16 * std::size_t(b->deferred()[k].in));
    dzs.emplace_back(16 * std::size_t(b->deferred()[k].rows));
    dxs.emplace_back(peers.split(k) ? xs.back().size() : 0);
    split_layers += peers.split(k);
  }
  for (std::size_t k = 0; k < b->deferred().size(); ++k) {
    b->bind_deferred(k, xs[k].data(), dzs[k].data(), peers.split(k) ? dxs[k].data() : nullptr);
  }
  if (peers.split_first()) {
    peers.input.resize(16 * b->input_shape().size());
    b->bind_input(peers.input.data());
  }
  for (int step = 0; step < 3; ++step) {
    const double la = a->forward_backward(16, x.data(), y.data()).loss_sum;
    kernels::SgdDesc sd;
    sd.n = a->param_floats();
    sd.lr = lr;
    kernels::cpu::sgd_step(sd, a->params(), a->grads(), nullptr);
    const double lb = b->forward_backward_deferred(16, x.data(), y.data(), &peers).loss_sum;
    EXPECT_EQ(peers.releases, step + 1) << "step " << step;
    EXPECT_EQ(peers.forwards, (step + 1) * int(split_layers));
    EXPECT_EQ(peers.backwards, (step + 1) * int(split_layers));
    EXPECT_EQ(peers.first_forwards, peers.split_first() ? step + 1 : 0);
    EXPECT_EQ(peers.first_backwards, peers.first_forwards);
    EXPECT_EQ(peers.xs_then, xs) << "step " << step << ": X written after the release";
    EXPECT_EQ(peers.dzs_then, dzs) << "step " << step << ": dZ written after the release";
    EXPECT_NEAR(la, lb, 1e-4 * std::fabs(la));
    for (std::size_t k = 0; k < b->deferred().size(); ++k) {
      const auto& d = b->deferred()[k];
      // The first half of the columns fused into the weights, the second through the gradient
      // buffer and an SGD step of its own.
      const int half = d.in / 2;
      b->deferred_weight_cols(k, 16, xs[k].data(), dzs[k].data(), 0, half, -lr, 1.0f, b->params());
      b->deferred_weight_cols(k, 16, xs[k].data(), dzs[k].data(), half, d.in, 1.0f, 0.0f,
                              b->grads());
      kernels::SgdDesc part = sd;
      part.n = std::size_t(d.in - half);
      for (int row = 0; row < d.rows; ++row) {
        const std::size_t lo = d.offset + std::size_t(row) * d.in + std::size_t(half);
        kernels::cpu::sgd_step(part, b->params() + lo, b->grads() + lo, nullptr);
      }
    }
    for (const auto& r : b->undeferred_ranges()) {
      kernels::SgdDesc part = sd;
      part.n = r.end - r.begin;
      kernels::cpu::sgd_step(part, b->params() + r.begin, b->grads() + r.begin, nullptr);
    }
  }
  double max_diff = 0;
  for (std::size_t i = 0; i < a->param_floats(); ++i)
    max_diff = std::max(max_diff, double(std::fabs(a->params()[i] - b->params()[i])));
  EXPECT_LT(max_diff, 1e-5) << "deferred and separate SGD drift apart";
  EXPECT_GT(std::fabs(a->params()[500] - 0.0f), 0.0f);
  EXPECT_GT(max_diff_from_init(*b, 4), 0.0) << "the deferred model never moved";
  // The ranges cover everything once: undeferred + deferred weights = all parameters.
  std::size_t covered = 0;
  for (const auto& r : b->undeferred_ranges()) covered += r.end - r.begin;
  for (const auto& d : b->deferred()) covered += std::size_t(d.rows) * d.in;
  EXPECT_EQ(covered, b->param_floats());
}

TEST(Model, DeferredUpdateMatchesGradientThenSgd) {
  // The MNIST CNN: the two Dense weight matrices defer.
  for (bool split : {false, true}) {
    expect_deferred_matches_gradient_then_sgd([] { return make_model(mnist_cnn_spec(), 16); }, 2,
                                              split);
  }
}

TEST(Model, DeferredUpdateOnLeNet) {
  // Three Dense layers defer, after pooling and a flatten.
  for (bool split : {false, true}) {
    expect_deferred_matches_gradient_then_sgd([] { return make_model(lenet_spec(), 16); }, 3,
                                              split);
  }
}

TEST(Model, DeferredUpdateWithADenseFirstLayer) {
  // A Dense first layer defers too: its X is the input batch, copied to the bound buffer.
  // Neither layer can be split: the first has no dX, the second's dX is the first's dZ.
  for (bool split : {false, true}) {
    expect_deferred_matches_gradient_then_sgd(
        [] {
          ModelSpec net({1, 28, 28});
          net.add(dense(32, Activation::kRelu)).add(dense(10));
          return make_model(net, 16);
        },
        2, split);
  }
}

TEST(Model, ASplitLayerNeedsItsDxBound) {
  auto m = make_model(mnist_cnn_spec(), 16);
  std::vector<std::vector<float>> xs, dzs, dxs(2);
  HalvesPeers peers(*m, true, xs, dzs, dxs);
  for (std::size_t k = 0; k < 2; ++k) {
    xs.emplace_back(16 * std::size_t(m->deferred()[k].in));
    dzs.emplace_back(16 * std::size_t(m->deferred()[k].rows));
    m->bind_deferred(k, xs[k].data(), dzs[k].data());
  }
  std::vector<float> x(16 * 784, 0.5f);
  std::vector<std::int32_t> y(16, 1);
  EXPECT_THROW(m->forward_backward_deferred(16, x.data(), y.data(), &peers), std::logic_error);
  // Nor can a layer that cannot be split take a dX: mnist_cnn's second Dense layer's dX is the
  // first one's dZ.
  std::vector<float> dx(16 * std::size_t(m->deferred()[1].in));
  EXPECT_FALSE(m->splittable(1));
  EXPECT_TRUE(m->splittable(0));
  // And a first layer's split output must be whole channels (26 x 26 columns each).
  EXPECT_EQ(m->first_layer_unit(), 26 * 26);
  EXPECT_THROW(m->first_forward_cols(16, x.data(), 16, 26 * 26, xs[0].data()),
               std::invalid_argument);
  EXPECT_THROW(m->bind_deferred(1, xs[1].data(), dzs[1].data(), dx.data()), std::invalid_argument);
}

TEST(Trainer, LinearScalingWarmsUpOverTheFirstEpoch) {
  TrainConfig c;
  c.lr = 0.2f;
  EXPECT_FLOAT_EQ(learning_rate(c, 1, 0, 100), 0.2f);
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 0, 100), 0.2f);
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 50, 100), 0.5f);
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 100, 100), 0.8f);
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 10000, 100), 0.8f);
  // A short epoch (31 steps): the default ramp still lasts kMinDefaultWarmupSteps (100) steps...
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 31, 31), 0.2f + 0.6f * 31.0f / 100.0f);
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 50, 31), 0.5f);
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 100, 31), 0.8f);
  // ...while an explicit --warmup-epochs means exactly that many epochs.
  TrainConfig one = c;
  one.warmup_epochs = 1;
  EXPECT_FLOAT_EQ(learning_rate(one, 4, 31, 31), 0.8f);
  c.lr_scaling = LrScaling::kNone;
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 0, 100), 0.2f);
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 1000, 100), 0.2f);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpurun-ckpt-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripsEveryField) {
  Checkpoint c;
  c.seed = 77;
  c.world_size = 2;
  c.batch_per_rank = 32;
  c.epoch = 3;
  c.step = 17;
  c.global_step = 400;
  c.epoch_loss_sum = 1.5;
  c.epoch_correct = 99;
  c.epoch_seen = 1088;
  c.params = {1.0f, -2.5f, 3.25f};
  c.velocity = {0.5f, 0.25f, 0.125f};
  const std::string sub = dir_ + "/ck";
  save_checkpoint(sub, c);
  EXPECT_TRUE(checkpoint_exists(sub));
  const Checkpoint r = load_checkpoint(checkpoint_path(sub));
  EXPECT_EQ(r.seed, 77u);
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.batch_per_rank, 32);
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.step, 17);
  EXPECT_EQ(r.global_step, 400);
  EXPECT_EQ(r.epoch_loss_sum, 1.5);
  EXPECT_EQ(r.epoch_correct, 99);
  EXPECT_EQ(r.epoch_seen, 1088);
  EXPECT_EQ(r.params, c.params);
  EXPECT_EQ(r.velocity, c.velocity);
  // Overwriting replaces atomically and leaves no temporary file behind.
  c.step = 18;
  save_checkpoint(sub, c);
  EXPECT_EQ(load_checkpoint(checkpoint_path(sub)).step, 18);
  EXPECT_EQ(std::system(("test $(ls '" + sub + "' | wc -l) -eq 1").c_str()), 0);
}

TEST_F(CheckpointTest, DetectsCorruptionAndTruncation) {
  Checkpoint c;
  c.params.assign(1000, 1.0f);
  save_checkpoint(dir_, c);
  const std::string p = checkpoint_path(dir_);
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  try {
    load_checkpoint(p);
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  save_checkpoint(dir_, c);
  EXPECT_EQ(::truncate(p.c_str(), 100), 0);
  EXPECT_THROW(load_checkpoint(p), std::runtime_error);
  EXPECT_THROW(load_checkpoint(dir_ + "/missing.bin"), std::runtime_error);
}

TEST(ProcessGroup, SingleRankCollectivesAreIdentities) {
  auto pg = make_single_process_group();
  EXPECT_EQ(pg->rank(), 0);
  EXPECT_EQ(pg->size(), 1);
  float v[2] = {1.5f, 2.5f};
  pg->allreduce_sum(v, 2);
  EXPECT_EQ(v[0], 1.5f);
  pg->barrier();
}

}  // namespace
}  // namespace gpurun::runtime

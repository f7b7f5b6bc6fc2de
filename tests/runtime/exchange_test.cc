// exchange_test.cc: the CPU exchanges (runtime/src/cpu/exchange*.cc) in one process, through the
// backend: two workers (--threads 2) are two members. The shared exchange splits the big Dense
// layer by columns between them; wherever the block boundaries fall (even, 1:3, 3:1, moved by
// measured speed) the weights come out bit for bit the same, and they agree with the allreduce
// exchange's (which sums in another order) to rounding. One worker alone steps the Dense layers
// inside backward, block by block, and agrees with the allreduce exchange too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <vector>

#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/process_group.h"
#include "model/rng.h"
#include "test_models.h"

namespace gpurun::runtime {
namespace {

constexpr int kBatch = 32, kSteps = 12;

Dataset noise(std::size_t count) {
  Dataset d;
  d.name = "noise";
  Rng rng(7);
  for (Split* s : {&d.train, &d.test}) {
    s->count = count;
    s->rows = s->cols = 28;
    s->pixels.resize(count * 28 * 28);
    for (auto& p : s->pixels) p = std::uint8_t(rng.below(256));
    s->labels.resize(count);
    for (auto& l : s->labels) l = std::int32_t(rng.below(10));
  }
  return d;
}

struct Trained {
  std::vector<float> params, velocity;
  std::string exchange, note;  // note: each member's blocks of the split layer at the end
};

Trained train_steps(const CpuOptions& cpu, float momentum = 0.9f) {
  const ModelSpec net = testing::mnist_cnn_spec();
  const Dataset data = noise(kBatch * kSteps);
  auto pg = make_single_process_group();
  std::ostringstream log;
  BackendOptions o;
  o.cpu = cpu;
  BackendConfig cfg;
  cfg.batch_per_rank = kBatch;
  cfg.momentum = momentum;
  auto backend = make_backend(*pg, net, data, cfg, o, log);
  std::vector<float> init(net.param_floats());
  net.init_params(42, init.data());
  backend->set_state(init.data(), nullptr);
  EpochPlan plan;
  plan.steps = kSteps;
  for (int i = 0; i < kBatch * kSteps; ++i) plan.indices.push_back(i);
  plan.lr.assign(kSteps, 0.05f);
  backend->begin_epoch(plan);
  for (int t = 0; t < kSteps; ++t) {
    backend->step(t, false);
    if ((t + 1) % backend->sync_every() == 0 || t + 1 == kSteps) backend->sync(SyncAt::kSettle);
  }
  Trained r;
  backend->get_state(&r.params, &r.velocity);
  r.exchange = backend->info().exchange;
  r.note = backend->epoch_note();
  return r;
}

CpuOptions workers(int threads, Exchange e, SplitShares split = {}) {
  CpuOptions c;
  c.kernels = kernels::cpu::CpuKernels::kOpenBlas;
  c.threads = threads;
  c.exchange = e;
  c.split = split;
  return c;
}

TEST(Exchange, SharedWeightsDoNotDependOnWhereTheSplitFalls) {
  const Trained even = train_steps(workers(2, Exchange::kShared, {false, {}}));
  ASSERT_EQ(even.exchange, "shared");
  const Trained measured = train_steps(workers(2, Exchange::kShared, {true, {}}));
  const Trained one_three = train_steps(workers(2, Exchange::kShared, {false, {1, 3}}));
  const Trained three_one = train_steps(workers(2, Exchange::kShared, {false, {3, 1}}));
  // The boundaries did fall differently (the test can fail).
  EXPECT_NE(one_three.note, three_one.note);
  EXPECT_NE(one_three.note, even.note);
  for (const Trained* r : {&measured, &one_three, &three_one}) {
    EXPECT_EQ(r->params, even.params);
    EXPECT_EQ(r->velocity, even.velocity);
  }
}

// The largest difference between a and b's parameters, checking that they trained.
double worst_difference(const Trained& a, const Trained& b) {
  EXPECT_EQ(a.params.size(), b.params.size());
  double worst = 0, moved = 0;
  const ModelSpec net = testing::mnist_cnn_spec();
  std::vector<float> init(net.param_floats());
  net.init_params(42, init.data());
  for (std::size_t i = 0; i < a.params.size() && i < b.params.size(); ++i) {
    worst = std::max(worst, double(std::fabs(a.params[i] - b.params[i])));
    moved = std::max(moved, double(std::fabs(a.params[i] - init[i])));
  }
  EXPECT_GT(moved, 1e-3) << "the steps did not train";
  return worst;
}

TEST(Exchange, SharedAndAllreduceAgreeToRounding) {
  const Trained shared = train_steps(workers(2, Exchange::kShared));
  const Trained allreduce = train_steps(workers(2, Exchange::kAllreduce));
  ASSERT_EQ(allreduce.exchange, "allreduce");
  EXPECT_LT(worst_difference(shared, allreduce), 1e-4) << "the exchanges disagree beyond rounding";
}

// A worker alone forms each block of dX from the weights before their step, then steps the
// block. It agrees with the allreduce exchange (which steps after backward) to rounding: with
// momentum the two differ only in the last bits of the convolution's gradient (4e-8 here);
// without, the shared exchange's step is fused into the sgemm (w += -lr dZ^T X), which rounds
// once where the allreduce exchange rounds twice. A block's dX formed from stepped weights
// moves the result by orders of magnitude more.
TEST(Exchange, AloneStepsInsideBackwardAsTheAllreduceExchangeDoes) {
  for (float momentum : {0.9f, 0.0f}) {
    const Trained shared = train_steps(workers(1, Exchange::kShared), momentum);
    ASSERT_EQ(shared.exchange, "shared");
    const Trained allreduce = train_steps(workers(1, Exchange::kAllreduce), momentum);
    ASSERT_EQ(allreduce.exchange, "allreduce");
    const double worst = worst_difference(shared, allreduce);
    std::cout << "momentum " << momentum << ": worst difference " << worst << "\n";
    EXPECT_LT(worst, 1e-6) << "momentum " << momentum;
  }
}

}  // namespace
}  // namespace gpurun::runtime

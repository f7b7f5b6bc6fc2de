// exchange_test.cc: the CPU exchanges (runtime/src/cpu/exchange*.cc) in one process, through the
// backend: two workers (--threads 2) are two members. The shared exchange splits the big Dense
// layer by columns between them; wherever the block boundaries fall (even, 1:3, 3:1, moved by
// measured speed) the weights come out bit for bit the same, and they agree with the allreduce
// exchange's (which sums in another order) to rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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

Trained train_steps(const CpuOptions& cpu) {
  const ModelSpec net = testing::mnist_cnn_spec();
  const Dataset data = noise(kBatch * kSteps);
  auto pg = make_single_process_group();
  std::ostringstream log;
  BackendOptions o;
  o.cpu = cpu;
  BackendConfig cfg;
  cfg.batch_per_rank = kBatch;
  cfg.momentum = 0.9f;
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
    if ((t + 1) % backend->sync_every() == 0 || t + 1 == kSteps) backend->sync();
  }
  Trained r;
  backend->get_state(&r.params, &r.velocity);
  r.exchange = backend->info().exchange;
  r.note = backend->epoch_note();
  return r;
}

CpuOptions two_workers(Exchange e, SplitShares split = {}) {
  CpuOptions c;
  c.kernels = kernels::cpu::CpuKernels::kOpenBlas;
  c.threads = 2;
  c.exchange = e;
  c.split = split;
  return c;
}

TEST(Exchange, SharedWeightsDoNotDependOnWhereTheSplitFalls) {
  const Trained even = train_steps(two_workers(Exchange::kShared, {false, {}}));
  ASSERT_EQ(even.exchange, "shared");
  const Trained measured = train_steps(two_workers(Exchange::kShared, {true, {}}));
  const Trained one_three = train_steps(two_workers(Exchange::kShared, {false, {1, 3}}));
  const Trained three_one = train_steps(two_workers(Exchange::kShared, {false, {3, 1}}));
  // The boundaries did fall differently (the test can fail).
  EXPECT_NE(one_three.note, three_one.note);
  EXPECT_NE(one_three.note, even.note);
  for (const Trained* r : {&measured, &one_three, &three_one}) {
    EXPECT_EQ(r->params, even.params);
    EXPECT_EQ(r->velocity, even.velocity);
  }
}

TEST(Exchange, SharedAndAllreduceAgreeToRounding) {
  const Trained shared = train_steps(two_workers(Exchange::kShared));
  const Trained allreduce = train_steps(two_workers(Exchange::kAllreduce));
  ASSERT_EQ(allreduce.exchange, "allreduce");
  ASSERT_EQ(shared.params.size(), allreduce.params.size());
  double worst = 0, moved = 0;
  const ModelSpec net = testing::mnist_cnn_spec();
  std::vector<float> init(net.param_floats());
  net.init_params(42, init.data());
  for (std::size_t i = 0; i < shared.params.size(); ++i) {
    worst = std::max(worst, double(std::fabs(shared.params[i] - allreduce.params[i])));
    moved = std::max(moved, double(std::fabs(shared.params[i] - init[i])));
  }
  EXPECT_GT(moved, 1e-3) << "the steps did not train";
  EXPECT_LT(worst, 1e-4) << "the exchanges disagree beyond rounding";
}

}  // namespace
}  // namespace gpurun::runtime

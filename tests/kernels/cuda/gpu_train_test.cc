// gpu_train_test.cc: the GPU trainer end to end on a small synthetic dataset (no files needed):
// its first 100 per-step losses follow the CPU path's (same initial weights, same sampler, same
// learning rate) within 2e-3 + 2e-3*|cpu|, CUDA Graph replay and eager launches give the same
// losses (1e-6), and it learns. Skips without a CUDA device, except cuda_available() itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "gpu_test_util.h"
#include "gpurun/kernels/sgd.h"
#include "gpurun/runtime/gpu_trainer.h"
#include "gpurun/runtime/model.h"
#include "gpurun/runtime/sampler.h"
#include "gpurun/runtime/trainer.h"

namespace gpurun::runtime {
namespace {

// Class c is a bright 6x6 square at a class-dependent place over dim noise: learnable in a few
// dozen steps, so the losses move and any divergence between the paths shows.
Split synthetic(std::size_t count, std::uint64_t seed) {
  Split s;
  s.count = count;
  s.rows = s.cols = 28;
  s.pixels.resize(count * 784);
  s.labels.resize(count);
  std::uint64_t r = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&r] {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    return std::uint32_t(r >> 33);
  };
  for (std::size_t i = 0; i < count; ++i) {
    const int c = int(next() % 10);
    s.labels[i] = c;
    std::uint8_t* img = &s.pixels[i * 784];
    for (int p = 0; p < 784; ++p) img[p] = std::uint8_t(next() % 60);
    const int r0 = (c / 5) * 12 + 4 + int(next() % 3), c0 = (c % 5) * 5 + 1;
    for (int y = r0; y < r0 + 6; ++y)
      for (int x = c0; x < c0 + 6; ++x) img[y * 28 + x] = std::uint8_t(200 + next() % 56);
  }
  return s;
}

Dataset synthetic_dataset() {
  Dataset d;
  d.name = "synthetic";
  d.train = synthetic(6400, 1);
  d.test = synthetic(512, 2);
  return d;
}

TEST(GpuTrainer, CudaAvailableMatchesTheDevice) {
  EXPECT_EQ(cuda_available(), gpurun::testing::no_device_reason().empty());
}

// The CPU path, step by step, as train() runs it on one rank.
std::vector<double> cpu_losses(const Dataset& data, const TrainConfig& cfg, int steps) {
  auto model = make_mnist_cnn({1, 28, 28}, data.classes, cfg.batch_per_rank);
  model->init(cfg.seed);
  DistributedSampler sampler(data.train.count, 1, 0, cfg.batch_per_rank, cfg.seed);
  sampler.set_epoch(0);
  const int B = cfg.batch_per_rank;
  std::vector<float> x(std::size_t(B) * 784);
  std::vector<std::int32_t> y(B), idx(B);
  std::vector<double> out;
  for (int t = 0; t < steps; ++t) {
    sampler.step_indices(std::size_t(t), idx.data());
    data.train.gather(idx.data(), B, x.data(), y.data());
    const StepResult r = model->forward_backward(B, x.data(), y.data());
    out.push_back(r.loss_sum / B);
    kernels::SgdDesc sd;
    sd.n = model->param_floats();
    sd.lr = learning_rate(cfg, 1, t, std::int64_t(sampler.steps_per_epoch()));
    kernels::cpu::sgd_step(sd, model->params(), model->grads(), nullptr);
  }
  return out;
}

TEST(GpuTrainer, First100LossesMatchCpuAndGraphMatchesEager) {
  GPURUN_REQUIRE_GPU();
  const Dataset data = synthetic_dataset();
  TrainConfig cfg;
  cfg.epochs = 1;  // 6400 / 64 = exactly 100 steps
  cfg.batch_per_rank = 64;
  cfg.lr = 0.2f;
  cfg.seed = 42;
  const std::vector<double> cpu = cpu_losses(data, cfg, 100);

  auto pg = make_single_process_group();
  std::ostringstream log;
  GpuOptions opt;
  opt.record_losses = 100;
  opt.loss_every = 7;  // read-backs at odd places must not change anything
  const GpuTrainResult graph = train_gpu(*pg, data, cfg, opt, log);
  opt.graph = GraphMode::kEager;
  opt.breakdown = true;
  const GpuTrainResult eager = train_gpu(*pg, data, cfg, opt, log);
  ASSERT_EQ(graph.step_losses.size(), 100u) << log.str();
  ASSERT_EQ(eager.step_losses.size(), 100u) << log.str();
  EXPECT_TRUE(graph.graph);
  EXPECT_FALSE(eager.graph);
  EXPECT_EQ(graph.backend, AllreduceBackend::kNone);
  EXPECT_EQ(graph.device.rfind("cuda:", 0), 0u) << graph.device;

  int bad = 0;
  for (int t = 0; t < 100; ++t) {
    const double tol = 2e-3 + 2e-3 * std::fabs(cpu[t]);
    if (!(std::fabs(graph.step_losses[t] - cpu[t]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << "step " << t << ": gpu " << graph.step_losses[t] << " cpu " << cpu[t];
    }
    if (!(std::fabs(graph.step_losses[t] - eager.step_losses[t]) <= 1e-6) && bad++ < 5) {
      ADD_FAILURE() << "step " << t << ": graph " << graph.step_losses[t] << " eager "
                    << eager.step_losses[t];
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_NEAR(graph.step_losses[0], cpu[0], 1e-5 * cpu[0]) << "the very first loss";
  EXPECT_LT(graph.step_losses[99], 0.5 * graph.step_losses[0]) << "it did not learn";
  EXPECT_GT(graph.train.test_accuracy, 0.8);
  EXPECT_EQ(graph.train.param_checksum, eager.train.param_checksum)
      << "graph replay and eager launches should run the same kernels on the same data";
  EXPECT_GT(eager.kernel_seconds, 0.0);
}

}  // namespace
}  // namespace gpurun::runtime

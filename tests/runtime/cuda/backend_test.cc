// backend_test.cc: the CUDA backend through the one training loop, against the CPU backend on a
// small synthetic dataset (no files needed): for the MNIST CNN and for LeNet (pooling, flatten,
// three Dense layers) the first 100 per-step losses follow the CPU's (same initial weights,
// sampler and learning rates) within 2e-3 + 2e-3*|cpu|; CUDA Graph replay and eager launches give
// the same losses (1e-6) and weights; it learns; and a checkpoint written by either backend
// resumes on the other (one format). The program exits 77 (skipped) without a CUDA device.
#include "gpurun/runtime/backend.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "../test_models.h"
#include "gpu_test_util.h"
#include "synthetic_data.h"
#include "gpurun/runtime/trainer.h"

namespace gpurun::runtime {
namespace {

TrainConfig hundred_steps() {
  TrainConfig cfg;
  cfg.epochs = 1;  // 6400 / 64 = exactly 100 steps
  cfg.batch_per_rank = 64;
  cfg.lr = 0.2f;
  cfg.seed = 42;
  cfg.record_losses = 100;
  return cfg;
}

TrainResult run(const ModelSpec& model, const Dataset& data, const TrainConfig& cfg,
                const BackendOptions& opt) {
  auto pg = make_single_process_group();
  std::ostringstream log;
  auto backend = make_backend(*pg, model, data, backend_config(cfg), opt, log);
  TrainResult r = train(*pg, data, model, *backend, cfg, log);
  EXPECT_EQ(r.step_losses.size(), std::size_t(cfg.record_losses)) << log.str();
  return r;
}

BackendOptions cpu_options() {
  BackendOptions o;
  o.device = Device::kCpu;
  return o;
}

BackendOptions cuda_options(GraphMode graph) {
  BackendOptions o;
  o.device = Device::kCuda;
  o.cuda.graph = graph;
  o.cuda.loss_every = 7;  // syncs at odd places must not change anything
  o.cuda.breakdown = graph == GraphMode::kEager;
  return o;
}

void expect_gpu_follows_cpu(const ModelSpec& model) {
  const Dataset data = testing::synthetic_dataset();
  const TrainConfig cfg = hundred_steps();
  const TrainResult cpu = run(model, data, cfg, cpu_options());
  const TrainResult graph = run(model, data, cfg, cuda_options(GraphMode::kCapture));
  const TrainResult eager = run(model, data, cfg, cuda_options(GraphMode::kEager));
  ASSERT_EQ(graph.step_losses.size(), 100u);
  ASSERT_EQ(eager.step_losses.size(), 100u);
  EXPECT_TRUE(graph.backend.graph);
  EXPECT_FALSE(eager.backend.graph);
  EXPECT_EQ(graph.backend.exchange, "none");
  EXPECT_EQ(graph.backend.device.rfind("cuda:", 0), 0u) << graph.backend.device;
  int bad = 0;
  for (std::size_t t = 0; t < 100; ++t) {
    const double c = cpu.step_losses[t], g = graph.step_losses[t], e = eager.step_losses[t];
    if (!(std::fabs(g - c) <= 2e-3 + 2e-3 * std::fabs(c)) && bad++ < 5) {
      ADD_FAILURE() << "step " << t << ": gpu " << g << " cpu " << c;
    }
    if (!(std::fabs(g - e) <= 1e-6) && bad++ < 5) {
      ADD_FAILURE() << "step " << t << ": graph " << g << " eager " << e;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_NEAR(graph.step_losses[0], cpu.step_losses[0], 1e-5 * cpu.step_losses[0]) << "step 0";
  EXPECT_LT(graph.step_losses[99], 0.5 * graph.step_losses[0]) << "it did not learn";
  EXPECT_GT(graph.test_accuracy, 0.8);
  EXPECT_EQ(graph.param_checksum, eager.param_checksum)
      << "graph replay and eager launches should run the same kernels on the same data";
  EXPECT_GT(eager.kernel_seconds, 0.0);
}

TEST(CudaBackend, CudaAvailableSaysSo) {
  EXPECT_TRUE(cuda_available());
}

TEST(CudaBackend, MnistCnnFirst100LossesFollowTheCpu) {
  expect_gpu_follows_cpu(testing::mnist_cnn_spec());
}

TEST(CudaBackend, LeNetFirst100LossesFollowTheCpu) {
  expect_gpu_follows_cpu(testing::lenet_spec());
}

// 50 steps on one backend with a checkpoint, the other 50 on the other after --resume: the
// result is close to 100 steps on either (the step losses agree to the tolerance above).
TEST(CudaBackend, CheckpointsResumeAcrossBackends) {
  const Dataset data = testing::synthetic_dataset();
  const ModelSpec model = testing::lenet_spec();
  char dir[] = "/tmp/gpurun-ckpt-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  for (const bool gpu_first : {true, false}) {
    TrainConfig first = hundred_steps();
    first.record_losses = 0;
    first.max_steps = 50;
    first.checkpoint_dir = std::string(dir) + (gpu_first ? "/g2c" : "/c2g");
    run(model, data, first, gpu_first ? cuda_options(GraphMode::kCapture) : cpu_options());
    TrainConfig second = first;
    second.max_steps = -1;
    second.resume = true;
    const TrainResult r =
        run(model, data, second, gpu_first ? cpu_options() : cuda_options(GraphMode::kCapture));
    EXPECT_TRUE(r.resumed);
    EXPECT_EQ(r.global_steps, 100);
    EXPECT_GT(r.test_accuracy, 0.8) << (gpu_first ? "GPU then CPU" : "CPU then GPU");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpurun::runtime

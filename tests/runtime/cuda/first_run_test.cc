// first_run_test.cc (stand-in build only): properties of the CUDA backend that a real device
// cannot show but the stand-in counts or lets us arrange (tests/standin), each a bug the GPU path
// had before it ever ran:
//  - nothing is allocated once the backend is set up (evaluate() allocated on every call);
//  - buffers are zeroed on their owner's stream (cudaMemset on the legacy stream, then a host
//    wait, for every buffer);
//  - the device follows the launcher's contract: under gpurun the first visible GPU is the
//    rank's own; otherwise local ranks take the node's GPUs in order (local_rank % count picked
//    another GPU than gpurun planned for a rank with several).
// Run with GPURUN_STANDIN_DEVICES=2 (ctest sets it).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <sstream>

#include "../test_models.h"
#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/trainer.h"
#include "gpurun_standin/inspect.h"
#include "synthetic_data.h"

namespace gpurun::runtime {
namespace {

// One rank in the job, at a chosen place among the ranks of its node.
class NodeRankGroup final : public ProcessGroup {
 public:
  NodeRankGroup(int local_rank, int local_size)
      : one_(make_single_process_group()), local_rank_(local_rank), local_size_(local_size) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "test"; }
  void allreduce_sum(float* d, std::size_t n) override { one_->allreduce_sum(d, n); }
  void allreduce_sum(double* d, std::size_t n) override { one_->allreduce_sum(d, n); }
  void broadcast(void* d, std::size_t b, int root) override { one_->broadcast(d, b, root); }
  void barrier() override {}

 private:
  std::unique_ptr<ProcessGroup> one_;
  int local_rank_, local_size_;
};

TrainConfig few_steps() {
  TrainConfig cfg;
  cfg.epochs = 1;
  cfg.batch_per_rank = 64;
  cfg.eval_batch = 100;
  cfg.lr = 0.2f;
  cfg.max_steps = 12;
  return cfg;
}

BackendOptions cuda_options() {
  BackendOptions o;
  o.device = Device::kCuda;
  o.cuda.loss_every = 5;
  // cuDNN's heuristics: benchmarking runs cuDNN's Find on its handle's default stream at set-up,
  // which is not what these tests are about.
  o.cuda.conv_algo = ConvAlgo::kHeuristic;
  return o;
}

TEST(FirstRun, NothingIsAllocatedAfterSetup) {
  const Dataset data = testing::synthetic_dataset();
  const ModelSpec model = testing::mnist_cnn_spec();
  const TrainConfig cfg = few_steps();
  auto pg = make_single_process_group();
  std::ostringstream log;
  auto backend = make_backend(*pg, model, data, backend_config(cfg), cuda_options(), log);
  const gpurun_standin::Counts set_up = gpurun_standin::counts();
  const TrainResult r = train(*pg, data, model, *backend, cfg, log);  // steps and evaluation
  (void)backend->evaluate(cfg.eval_batch);
  (void)backend->evaluate(7);  // another batch size, a last partial batch
  const gpurun_standin::Counts after = gpurun_standin::counts();
  EXPECT_EQ(r.global_steps, 12);
  EXPECT_GT(after.kernels, set_up.kernels) << "nothing ran";
  EXPECT_EQ(after.device_allocs, set_up.device_allocs)
      << "cudaMalloc after set-up (steps and evaluations must reuse what the backend allocated)";
}

TEST(FirstRun, BuffersAreZeroedWithoutTheLegacyStream) {
  const Dataset data = testing::synthetic_dataset();
  const ModelSpec model = testing::lenet_spec();
  const TrainConfig cfg = few_steps();
  auto pg = make_single_process_group();
  std::ostringstream log;
  const gpurun_standin::Counts before = gpurun_standin::counts();
  auto backend = make_backend(*pg, model, data, backend_config(cfg), cuda_options(), log);
  const TrainResult r = train(*pg, data, model, *backend, cfg, log);
  EXPECT_GT(r.test_accuracy, 0.0);
  EXPECT_EQ(gpurun_standin::counts().legacy_ops - before.legacy_ops, 0)
      << "the backend used the legacy default stream (which its non-blocking streams do not wait "
         "for): zero and upload on the stream that uses the buffers";
}

int device_of(int local_rank, int local_size, bool from_launcher) {
  const Dataset data = testing::synthetic_dataset();
  NodeRankGroup pg(local_rank, local_size);
  BackendOptions o = cuda_options();
  o.cuda.gpus_from_launcher = from_launcher;
  std::ostringstream log;
  auto backend = make_backend(pg, testing::lenet_spec(), data, backend_config(few_steps()), o, log);
  int dev = -1;
  EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
  return dev;
}

TEST(FirstRun, UnderGpurunTheFirstVisibleGpuIsTheRanks) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(count, 2) << "run with GPURUN_STANDIN_DEVICES=2";
  // gpurun --gpus-per-rank 2: local rank 1 sees its own two GPUs; the first is its device.
  EXPECT_EQ(device_of(1, 2, true), 0);
  EXPECT_EQ(device_of(3, 4, true), 0);
}

TEST(FirstRun, WithoutALauncherLocalRanksTakeTheNodesGpusInOrder) {
  EXPECT_EQ(device_of(0, 2, false), 0);
  EXPECT_EQ(device_of(1, 2, false), 1);
  // Four ranks on two GPUs share them in contiguous pairs.
  EXPECT_EQ(device_of(0, 4, false), 0);
  EXPECT_EQ(device_of(1, 4, false), 0);
  EXPECT_EQ(device_of(2, 4, false), 1);
  EXPECT_EQ(device_of(3, 4, false), 1);
}

}  // namespace
}  // namespace gpurun::runtime

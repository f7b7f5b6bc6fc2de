// trainer.h: the data-parallel training loop. Each step: gather this rank's shard of the global
// batch, forward + backward, combine the gradients (ONE allreduce of the gradient buffer, which
// also carries the loss, the correct count and the stop flag; or, for ranks on one node, the
// shared-memory exchange below), then SGD with 1/(ranks x replicas) folded in. Initial weights come
// from rank 0; evaluation is sharded and reduced; rank 0 writes checkpoints.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "gpurun/runtime/dataset.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime {

enum class LrScaling { kLinear, kNone };

// How the ranks combine their gradients each step.
//  kAllreduce: each rank writes its whole gradient (11 MB for the MNIST CNN) and one
//    MPI_Allreduce sums it; then every rank applies SGD to its own copy of the parameters.
//  kShared: for ranks on one node. The parameters live once, in memory all ranks map. Dense
//    layers defer dW = dZ^T X: each rank leaves its X and dZ in shared memory, and after a
//    barrier each rank updates its share of the weight rows from every rank's X and dZ, with the
//    SGD step inside the sgemm (Poseidon's "sufficient factors", without sending them anywhere).
//    Only the small gradients (convolution, biases: 464 floats) and the step's stats are summed.
//    Per rank this is the one-rank step plus two barriers.
//  kAuto: kShared when every rank is on one node and no micro-batching is asked for.
enum class Exchange { kAuto, kAllreduce, kShared };

// The default warm-up never lasts fewer steps than this: on a small data set one epoch is a few
// dozen steps at 4 ranks, too short a ramp to 4x the rate (0.2 x 4 diverged on 8,000 digits with
// 31 steps; 93 steps held accuracy within 0.4 points of one rank).
inline constexpr std::int64_t kMinDefaultWarmupSteps = 100;

struct TrainConfig {
  int epochs = 8;
  int batch_per_rank = 64;
  float lr = 0.2f;  // the single-rank learning rate
  LrScaling lr_scaling = LrScaling::kLinear;
  // < 0 (the default): with linear scaling, one epoch and at least kMinDefaultWarmupSteps steps;
  // without scaling, none. >= 0: exactly that many epochs.
  double warmup_epochs = -1;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  std::uint64_t seed = 42;
  std::string checkpoint_dir;  // empty: no checkpoints
  bool resume = false;
  std::int64_t max_steps = -1;  // stop (and checkpoint) after this many global steps
  int eval_batch = 256;
  int micro_batch = 0;  // > 0: accumulate gradients over micro-batches of this size
  int threads = 1;      // per rank: replicas on slices of the batch (see trainer.cc)
  Exchange exchange = Exchange::kAuto;
  bool progress = false;  // rank 0 draws a progress bar (stdout is a terminal)
};

struct EpochStats {
  int epoch = 0;  // 1-based, as printed
  double loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0;
  double seconds = 0, images_per_second = 0, allreduce_share = 0;  // share: of the exchange
};

enum class StopReason { kFinished, kSignal, kMaxSteps };

struct TrainResult {
  std::vector<EpochStats> epochs;
  StopReason stop = StopReason::kFinished;
  int signal = 0;
  // allreduce_seconds: the gradient exchange; with Exchange::kShared, the barriers (including
  // waiting for the slowest rank) and the sum of the small gradients.
  double seconds_total = 0, train_seconds = 0, compute_seconds = 0, allreduce_seconds = 0;
  // CPU time this process spent in the training steps (all its threads): on a machine shared with
  // other work, images per CPU-second still says what the code costs.
  double train_cpu_seconds = 0;
  std::int64_t images = 0;  // trained in this process's run, all ranks together
  double final_loss = 0, train_accuracy = 0, test_accuracy = 0, test_loss = 0;
  float lr_peak = 0;
  std::int64_t global_steps = 0, steps_per_epoch = 0;
  std::size_t param_count = 0;
  int workers = 1;                           // replicas per rank that --threads gave
  bool fused_update = false;                 // SGD inside the Dense layers' weight-gradient sgemm
  Exchange exchange = Exchange::kAllreduce;  // what the run used (never kAuto)
  bool resumed = false;
  std::int64_t resumed_epoch = 0, resumed_step = 0;
  std::uint64_t param_checksum = 0;  // FNV-1a of the final parameter bytes (bitwise comparisons)
};

const char* exchange_name(Exchange e);  // "auto", "allreduce", "shared"

// Throws on bad configuration or data; `log` receives rank 0's lines (pass a null stream on
// other ranks).
TrainResult train(ProcessGroup& pg, const Dataset& data, const TrainConfig& cfg, std::ostream& log);

// The learning rate at a global step (exposed for tests).
float learning_rate(const TrainConfig& cfg, int world_size, std::int64_t global_step,
                    std::int64_t steps_per_epoch);

}  // namespace gpurun::runtime

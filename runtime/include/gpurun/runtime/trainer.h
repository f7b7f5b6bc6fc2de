// trainer.h: the data-parallel training loop, written once for every device. It owns what does
// not depend on the device: the distributed sampler, epochs, the learning-rate schedule with
// warm-up, initial weights (ModelSpec::init_params on rank 0), checkpoints and resume (one format
// for every backend), stop signals (SIGUSR1/SIGUSR2/SIGTERM: every rank stops at the same step
// and checkpoints), the heartbeat the launcher watches, evaluation each epoch and the result the
// report is made from. A Backend (backend.h) does the steps.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/dataset.h"
#include "gpurun/runtime/environment.h"
#include "gpurun/runtime/model_spec.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime {

enum class LrScaling { kLinear, kNone };

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
  std::string checkpoint_dir;   // empty: no checkpoints
  bool resume = false;          // continue from checkpoint_dir when it holds a checkpoint
  std::int64_t max_steps = -1;  // stop (and checkpoint) after this many global steps
  int eval_batch = 256;
  bool progress = false;  // rank 0 draws a progress bar (stdout is a terminal)
  // Where the loop writes the global step at every sync, for gpurun --hang-timeout. The default
  // is this process's GPURUN_HEARTBEAT (read at the edge, environment.h), so every program on the
  // runtime beats under gpurun without a line of its own; "" writes none.
  std::string heartbeat_path = heartbeat_from_environment();
  int record_losses = 0;  // keep this rank's first N per-step losses (tests)
};

struct EpochStats {
  int epoch = 0;  // 1-based, as printed
  double loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0;
  double seconds = 0, images_per_second = 0, exchange_share = 0;
};

enum class StopReason { kFinished, kSignal, kMaxSteps };

struct TrainResult {
  BackendInfo backend;
  std::vector<EpochStats> epochs;
  StopReason stop = StopReason::kFinished;
  int signal = 0;
  // exchange_seconds: combining gradients (BackendTimes::exchange); compute: the rest of the
  // steps. kernel/host: the CUDA backend's breakdown (0 elsewhere).
  double seconds_total = 0, train_seconds = 0, compute_seconds = 0, exchange_seconds = 0;
  double kernel_seconds = 0, host_seconds = 0;
  // CPU time this process spent in the training steps (all its threads): on a machine shared with
  // other work, images per CPU-second still says what the code costs.
  double train_cpu_seconds = 0;
  std::int64_t images = 0;  // trained in this process's run, all ranks together
  // The last epoch's training loss and accuracy (a partial epoch's when stopped in one); none when
  // no step was trained, in this run or before its checkpoint. The test figures: the final
  // parameters, evaluated.
  std::optional<double> final_loss, train_accuracy;
  double test_accuracy = 0, test_loss = 0;
  float lr_peak = 0;
  // The rate of the last step (below lr_peak while the warm-up lasts); empty before any step.
  std::optional<float> lr_last;
  std::int64_t global_steps = 0, steps_per_epoch = 0;
  std::int64_t steps_run = 0;  // the steps this process ran (a resumed run: since its checkpoint)
  // Epochs whose end averaged in flight (SyncAt::kEpochEnd), their lines printed at the next sync.
  std::int64_t epoch_ends_overlapped = 0;
  std::size_t param_count = 0;
  double train_flops_per_example = 0;  // ModelSpec::train_flops_per_example
  bool resumed = false;
  std::int64_t resumed_epoch = 0, resumed_step = 0;
  std::uint64_t param_checksum = 0;  // FNV-1a of the final parameter bytes (bitwise comparisons)
  bool params_agree = true;          // every rank ended with rank 0's param_checksum
  std::vector<double> step_losses;   // record_losses first steps: this rank's mean loss
};

// Collective: every rank calls it. A bad configuration, a checkpoint directory that cannot be
// used and a checkpoint that cannot be resumed throw GroupError on every rank (process_group.h:
// say it on rank 0, return from main); failures later in the run (a device, writing a
// checkpoint) throw std::runtime_error on the rank that hit them, and the program must stop the
// job (abort_job_if_parallel). `log` receives rank 0's lines (pass a null stream on other ranks).
TrainResult train(ProcessGroup& pg, const Dataset& data, const ModelSpec& model, Backend& backend,
                  const TrainConfig& cfg, std::ostream& log);

// What a backend needs of cfg (backend.h): make_backend(pg, model, data, backend_config(cfg), ...).
BackendConfig backend_config(const TrainConfig& cfg);

// Checks what train() needs of cfg (epochs, batch sizes, resume needs a
// checkpoint directory); throws std::invalid_argument naming the field of TrainConfig.
void validate(const TrainConfig& cfg);

// The learning rate at a global step (exposed for tests).
float learning_rate(const TrainConfig& cfg, int world_size, std::int64_t global_step,
                    std::int64_t steps_per_epoch);

}  // namespace gpurun::runtime

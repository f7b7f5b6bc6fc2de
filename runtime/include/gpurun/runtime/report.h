// report.h: the run report JSON of DESIGN.md (world_size, device, dataset, epochs,
// batch_per_rank, global_batch, lr, seconds_total, seconds_per_epoch, images_per_second,
// allreduce_seconds, final_loss, train_accuracy, test_accuracy) plus per-epoch detail, the
// backend's choices and the final weights' checksum. One writer for every program and device.
#pragma once

#include <string>

#include "gpurun/runtime/trainer.h"

namespace gpurun::runtime {

// What the report says about the run beyond the config and the result.
struct ReportContext {
  std::string program;  // "mnist_cnn", "lenet"
  int world_size = 1;
  std::string process_group;  // ProcessGroup::backend(): "mpi" or "single"
  std::string dataset;
  std::size_t train_examples = 0, test_examples = 0;
  int threads = 1;  // per rank
  std::string lr_scaling;
  int restart_count = 0;  // GPURUN_RESTART_COUNT
};

// Throws std::runtime_error naming the path when a report cannot be written there: the path is a
// directory, or its folder does not exist or cannot be written. A program checks this before it
// trains, so a bad path is an error in a second, not after the run.
void check_report_path(const std::string& path);

// Writes atomically (temp file + rename); throws std::runtime_error naming the path.
void write_report(const std::string& path, const TrainConfig& cfg, const TrainResult& result,
                  const ReportContext& ctx);

}  // namespace gpurun::runtime

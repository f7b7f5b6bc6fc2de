// report.h: the run report JSON of DESIGN.md (world_size, device, dataset, epochs,
// batch_per_rank, global_batch, lr, seconds_total, seconds_per_epoch, images_per_second,
// allreduce_seconds, final_loss, train_accuracy, test_accuracy) plus per-epoch detail.
#pragma once

#include <string>

#include "gpurun/runtime/dataset.h"
#include "gpurun/runtime/process_group.h"
#include "gpurun/runtime/trainer.h"

struct ReportInput {
  const gpurun::runtime::ProcessGroup& pg;
  const gpurun::runtime::Dataset& data;
  const gpurun::runtime::TrainConfig& cfg;
  const gpurun::runtime::TrainResult& result;
  std::string device;
  int threads;
  std::string lr_scaling;
};

// Writes atomically (temp file + rename); throws std::runtime_error naming the path.
void write_report(const std::string& path, const ReportInput& in);

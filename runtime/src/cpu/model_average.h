// model_average.h (private): local SGD's meeting of the ranks (CpuOptions::local_sgd). Between
// two, each rank steps its own copy of the parameters; at each, every rank's parameters become
// the ranks' mean, and the statistics of the steps since the last (each rank's own) become
// their sums. In float, one allreduce of the parameters; in bfloat16 (local_sgd_bf16), one of
// each rank's change since the last average, added to that average (kept on every rank): half
// the bytes, and still the same bits on every rank after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime::cpu {

class ModelAverage {
 public:
  // Averages every `every` steps (the backend's sync_every()) of `floats` parameters.
  ModelAverage(ProcessGroup& pg, int every, std::size_t floats, bool bf16);
  int every() const { return every_; }
  // Not collective: every rank's parameters are `params` now (the run's start, a resume).
  void reset(const float* params);
  // Collective: p's loss, correct count and stop flag summed over the ranks, then the
  // parameters averaged.
  void average(float* params, Progress& p);
  // What `info` (the rank's own exchange, over its one-rank group) becomes with the averages:
  // local-sgd, an average's bytes spread over its steps, and the compression.
  void describe(BackendInfo& info) const;
  double seconds() const { return seconds_; }

 private:
  void average_bf16(float* params);
  std::size_t bytes() const;  // what one average hands to its allreduces

  ProcessGroup& pg_;
  const int every_;
  const std::size_t n_;
  const bool bf16_;
  std::vector<float> last_;           // bf16: the last average, the same on every rank
  std::vector<std::uint16_t> delta_;  // bf16: this rank's change since, then the ranks' sum
  double seconds_ = 0;
};

}  // namespace gpurun::runtime::cpu

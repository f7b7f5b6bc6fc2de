// model_average.h (private): local SGD's meeting of the ranks (CpuOptions::local_sgd). Between
// two, each rank steps its own copy of the parameters; at each, every rank's parameters become
// the ranks' mean, and the statistics of the steps since the last (each rank's own) become
// their sums. In float, one allreduce of the parameters; in bfloat16 (local_sgd_bf16), one of
// each rank's change since the last average, added to that average (kept on every rank): half
// the bytes, and still the same bits on every rank after it.
//
// Overlapped (local_sgd_overlap), a partway average is only started: each rank's change since
// the last average (in float or bfloat16) and its statistics go to MPI_Iallreduce, and the
// steps go on while they travel (progress() moves them after each step). At the next sync the
// sum arrives: the last average moves by the mean change, and so does each rank's parameters,
// less the change the rank itself sent, so its own steps since are kept (Wang, Liang and
// Joshi, "Overlap Local-SGD", ICASSP 2020, with the anchor taken whole). A settling sync
// (SyncAt::kSettle), or one whose arriving statistics carry a stop, then averages at once, so
// every rank leaves it with the same parameters, as without overlap. An epoch's end
// (SyncAt::kEpochEnd) starts one as partway does; land() then applies it before the next sync,
// and the average it made (the last average) can be evaluated in place of the rank's own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime::cpu {

class ModelAverage {
 public:
  // Averages every `every` steps (the backend's sync_every()) of `floats` parameters.
  ModelAverage(ProcessGroup& pg, int every, std::size_t floats, bool bf16, bool overlap);
  int every() const { return every_; }
  // Not collective: every rank's parameters are `params` now (the run's start, a resume).
  void reset(const float* params);
  // Collective: the parameters averaged, and `p` (this rank's steps since the last sync) made
  // what the sync reports, the same on every rank: its loss, correct count and stop flag
  // summed over the ranks. Overlapped and partway, the average is started instead, and `p`
  // becomes the previous sync's progress (none at the first).
  void average(float* params, Progress& p, SyncAt at);
  // Between syncs (after each step): an overlapped average in flight moves on (Open MPI moves a
  // non-blocking collective only inside MPI calls). Not collective.
  void progress();
  // Collective, overlapped, with an average in flight (started by a kEpochEnd sync): it is waited
  // for and applied, and its progress returned, as the next sync would.
  Progress land(float* params);
  // Overlapped: `params` and the last average change places (twice: back again). After land(),
  // the last average is what a settling sync would have left where the average was started.
  void swap_with_average(float* params);
  // What `info` (the rank's own exchange, over its one-rank group) becomes with the averages:
  // local-sgd, an average's bytes spread over its steps, and the compression.
  void describe(BackendInfo& info) const;
  double seconds() const { return seconds_; }

 private:
  void average_now(float* params, Progress& p);
  void average_bf16(float* params);
  void start(const float* params, const Progress& p);
  Progress finish(float* params);
  std::size_t bytes() const;  // what one average hands to its allreduces

  ProcessGroup& pg_;
  const int every_;
  const std::size_t n_;
  const bool bf16_, overlap_;
  std::vector<float> last_;           // bf16 or overlap: the last average, the same on every rank
  std::vector<std::uint16_t> delta_;  // bf16: this rank's change since, then the ranks' sum
  // Overlap: the average in flight. The change this rank sent (bf16: own16_; float: own_), the
  // sum that arrives in place of a copy of it (sum16_, sum_), and the statistics.
  std::vector<std::uint16_t> own16_, sum16_;
  std::vector<float> own_, sum_;
  double stats_[3] = {0, 0, 0};
  Progress sent_;  // the steps whose statistics are in flight
  std::unique_ptr<PendingSum> params_sum_, stats_sum_;
  double seconds_ = 0;
};

}  // namespace gpurun::runtime::cpu

// gpu_watch.h: what the daemon's samples say about its GPUs beyond their figures (issue 30, items 3
// and 4). From each sample it keeps:
//   - the processes on each GPU that the job holding it does not own: use outside the queue. With
//     `avoid` (the default), such a GPU is not given out; a job that would fit but for it waits
//     with the reason GpuBusyOutsideQueue, and the GPU returns when a sample finds it free;
//   - for each held GPU, since when it has been below the idle threshold without a break (the
//     page and /metrics flag a job that held it so for idle_after_ms);
//   - which GPUs no job holds but whose utilisation or memory says they are busy.
// It is derived state: a restarted daemon samples at once and rebuilds the outside use from what
// the GPUs show, and the idle runs from the samples in the store (restore_low).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/usage_sampler.h"
#include "gpurun/gpuinfo/gpu_sampler.h"

namespace gpurun::queue {

struct GpuWatchConfig {
  bool avoid_outside = true;        // --gpu-outside-queue avoid (true) | ignore
  double busy_percent = 5;          // --busy-percent: a GPU with no job at or above it (util or
                                    // memory share) is flagged
  double idle_percent = 5;          // --idle-percent: a held GPU below it ...
  int64_t idle_after_ms = 600'000;  // --idle-minutes: ... for this long is flagged
};

class GpuWatch {
 public:
  explicit GpuWatch(GpuWatchConfig cfg) : cfg_(cfg) {}
  const GpuWatchConfig& config() const { return cfg_; }

  // Each held GPU -> the running jobs holding it (one, or the shard jobs sharing it).
  using Holders = std::map<int, std::vector<int64_t>>;
  // One sample. Returns the GPUs whose use outside the queue began or ended with it.
  std::set<int> on_sample(const UsageSampler::Tick& t, const Holders& holders);

  // Whether the newest sample listed the GPUs' processes, and when it began. While they cannot be
  // listed (a failed sample, a driver or nvidia-smi that cannot tell), the GPUs last seen used
  // outside stay out, and GPUs are given out without a fresh look.
  bool processes_known() const { return known_; }
  bool sampled() const { return sampled_; }  // a sample came, good or not
  int64_t processes_ms() const { return processes_ms_; }
  // The processes on `gpu` outside the queue in the newest sample (empty when none).
  const std::vector<UsageSampler::GpuUse>& outside(int gpu) const;
  bool keeps_out(int gpu) const { return cfg_.avoid_outside && !outside(gpu).empty(); }

  // Since when the job holding `gpu` has kept it below idle_percent (nullopt: not now). A GPU
  // that several shard jobs share has no idle run: its utilisation is no one job's.
  std::optional<int64_t> low_since(int gpu) const;
  bool idle_flag(int gpu, int64_t now_ms) const;
  // No job holds the GPU but its newest figures reach busy_percent, or a process uses it.
  bool busy_flag(int gpu, const gpuinfo::GpuSample* s, bool held) const;
  // Recovery: job `job` holds `gpu` and has been below the threshold since `since_ms`.
  void restore_low(int gpu, int64_t job, int64_t since_ms) { low_[gpu] = {job, since_ms}; }

 private:
  struct Low {
    int64_t job = 0;
    int64_t since_ms = 0;
  };
  void track_low(const gpuinfo::GpuSnapshot& s, int64_t time_ms, const Holders& holders);

  GpuWatchConfig cfg_;
  bool sampled_ = false;
  bool known_ = false;
  int64_t processes_ms_ = 0;
  std::map<int, std::vector<UsageSampler::GpuUse>> outside_;
  std::map<int, Low> low_;
};

// The start of the newest unbroken run of samples below `percent` in `utils` (oldest first, as
// time_ms and utilisation; a sample without a figure neither breaks nor starts a run); nullopt
// when the newest figure is not below it.
std::optional<int64_t> low_run_start(
    const std::vector<std::pair<int64_t, std::optional<double>>>& utils, double percent);

}  // namespace gpurun::queue

// usage_sampler.h: the gpuq daemon's sampling thread. Every interval it samples the machine's
// GPUs (gpurun's GpuSampler: NVML, or nvidia-smi, which can take seconds on a busy or failing
// machine) and the CPU time and memory of each running job's session, away from the daemon's
// single-threaded poll loop; the loop picks the results up when fd() turns readable and writes
// them in its own transaction. The thread touches no daemon state.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gpurun/common/periodic.h"
#include "gpurun/gpuinfo/gpu_sampler.h"
#include "gpurun/gpuinfo/proc_usage.h"
#include "gpurun/queue/protocol.h"

namespace gpurun::queue {

class UsageSampler {
 public:
  struct Target {
    int64_t job_id = 0;
    int session = 0;  // the job's supervisor, its session leader
    bool operator==(const Target& o) const { return job_id == o.job_id && session == o.session; }
  };
  struct Tick {
    int64_t time_ms = 0;
    std::optional<gpuinfo::GpuSnapshot> gpus;  // nullopt when sampling failed (error says why)
    std::string error;
    std::map<int64_t, gpuinfo::ProcessUsage> jobs;  // by job id
  };

  // Samples at once, then every interval_s seconds (> 0), in a common::PeriodicThread.
  UsageSampler(gpuinfo::SamplerConfig cfg, int interval_s);
  UsageSampler(const UsageSampler&) = delete;
  UsageSampler& operator=(const UsageSampler&) = delete;

  int fd() const { return thread_.fd(); }  // readable while ticks wait
  void set_targets(std::vector<Target> targets);
  std::vector<Tick> take();  // the waiting ticks, oldest first

 private:
  bool tick();  // one run of the thread
  Tick sample_once(const std::vector<Target>& targets);

  std::optional<std::string> own_cgroup_;
  // The thread's own: the GPU sampler is made in it, from cfg_, on its first run.
  gpuinfo::SamplerConfig cfg_;
  std::optional<gpuinfo::GpuSampler> gpus_;
  std::string gpu_error_;
  bool started_ = false;
  std::mutex mu_;  // guards targets_ and ticks_
  std::vector<Target> targets_;
  std::deque<Tick> ticks_;
  common::PeriodicThread thread_;  // last: starts once everything it touches exists
};

}  // namespace gpurun::queue

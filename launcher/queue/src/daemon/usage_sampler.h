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
  // A process on a GPU (the snapshot's processes), as /proc tells of it: whose it is, and the
  // running job it belongs to (its session, or the job's own cgroup; 0 for none).
  struct GpuUse {
    gpuinfo::GpuProcess process;
    std::optional<uint32_t> uid;  // nullopt: gone, or in another pid namespace than gpuq's
    std::string user;             // the uid's name, or its number; "" when the uid is unknown
    std::string command;          // /proc/PID/comm
    int64_t job_id = 0;
  };
  struct Tick {
    int64_t time_ms = 0;  // when sampling began: the processes were listed after it
    std::optional<gpuinfo::GpuSnapshot> gpus;  // nullopt when sampling failed (error says why)
    std::string error;
    std::map<int64_t, gpuinfo::ProcessUsage> jobs;  // by job id
    std::vector<GpuUse> gpu_uses;                   // when gpus->processes_read
  };

  // Samples at once, then every interval_s seconds (> 0), in a common::PeriodicThread.
  UsageSampler(gpuinfo::SamplerConfig cfg, int interval_s);
  void sample_soon() { thread_.run_soon(); }  // a fresh tick now, not when the period says
  UsageSampler(const UsageSampler&) = delete;
  UsageSampler& operator=(const UsageSampler&) = delete;

  int fd() const { return thread_.fd(); }  // readable while ticks wait
  void set_targets(std::vector<Target> targets);
  std::vector<Tick> take();  // the waiting ticks, oldest first

 private:
  bool tick();  // one run of the thread
  Tick sample_once(const std::vector<Target>& targets);
  // Whose each GPU process is, and which target's (by session, or the target's own cgroup).
  std::vector<GpuUse> attribute(const std::vector<gpuinfo::GpuProcess>& processes,
                                const std::vector<Target>& targets,
                                const std::map<int64_t, std::string>& target_cgroups) const;

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

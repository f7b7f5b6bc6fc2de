// gpuq's scheduling decision as a pure function: given the eligible waiting jobs, the free GPU ids,
// the running jobs' expected end times and each user's decayed usage, which jobs start now and on
// which GPUs, and why the others wait. Order: priority, then fair share (less decayed GPU usage
// first), then submit time. EASY backfill: once the first job in that order cannot start, later
// jobs start only if they fit now and do not delay it (they end before its reserved start, or use
// GPUs it will not need then).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpurun::queue {

struct SchedJob {
  int64_t id = 0;
  uint32_t uid = 0;
  int priority = 0;
  int gpus = 1;
  int64_t time_limit_s = 0;  // 0 = unlimited
  int64_t submit_ms = 0;
  int shards = 0;  // > 0: a shard job (gpus is 0), which needs this many shards of one GPU
  std::string profile;  // a MIG profile: only MIG devices of it (SchedInput::profiles)
};

struct SchedRunning {
  int gpus = 0;
  uint32_t uid = 0;
  int64_t end_ms = 0;  // start + time limit; 0 = unknown (no limit)
};

struct SchedInput {
  int64_t now_ms = 0;
  std::vector<SchedJob> waiting;  // eligible only: not held, dependencies met, array cap free
  std::vector<int> free_gpus;  // whole GPUs: no job and no shard job holds them
  // Shared GPUs (gpuq daemon --shards-per-gpu): each one's shards, and those that running shard
  // jobs hold. A shard job goes to the shared GPU with the fewest shards left that still fit it
  // (so whole GPUs stay whole), else to a free GPU; a whole-GPU job never gets a GPU with shards
  // held. Running shard jobs count for nothing in the reservation (a GPU they share frees at no
  // time the scheduler can tell), so backfill behind a job waiting on them is conservative.
  std::map<int, int> shards_total;
  std::map<int, int> shards_held;
  // MIG devices: id -> profile. A job with a profile takes only devices of it; a job without one
  // takes any GPU, whole GPUs first (their ids are lower).
  std::map<int, std::string> profiles;
  // GPUs no job holds but that are kept out because something outside the queue uses them: a job
  // that would fit with them waits with the reason GpuBusyOutsideQueue rather than Resources.
  int gpus_outside = 0;
  std::vector<SchedRunning> running;
  std::map<uint32_t, double> usage;  // decayed GPU-seconds per uid
  int max_gpus_per_user = 0;         // 0 = no limit
};

struct SchedStart {
  int64_t job_id = 0;
  std::vector<int> gpus;
};

struct SchedOutput {
  std::vector<SchedStart> starts;
  // squeue's reason for every waiting job not started. String literals, in a vector: a pass over
  // 10,000 waiting jobs allocates nothing per job.
  std::vector<std::pair<int64_t, const char*>> reasons;
};

SchedOutput schedule(const SchedInput& in);

// Where each job still waiting after `out` stands: its place in the scheduling order (1 = next)
// and when it is expected to start (squeue --start), from the running jobs' time limits and,
// in order, each job ahead taking its GPUs for its own limit (for good when it has none); 0 when
// that cannot be told (jobs without a limit hold the GPUs it needs, a shard or MIG-profile job,
// or past the first kMaxEstimates in the order). Like Slurm's, an estimate, not a promise:
// jobs end early, and new ones of higher priority come.
struct SchedEstimate {
  int64_t job_id = 0;
  int position = 0;
  int64_t start_ms = 0;
};
constexpr int kMaxEstimates = 100;
std::vector<SchedEstimate> estimate_starts(const SchedInput& in, const SchedOutput& out);

// Exponential decay of past usage: value * 2^(-elapsed / half_life).
double decay_usage(double value, int64_t elapsed_ms, int64_t half_life_ms);

}  // namespace gpurun::queue

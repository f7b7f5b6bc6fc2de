// gpuq daemon: GPUs used outside the queue, and the idle and busy flags (gpu_watch.h). The
// sampling thread lists each GPU's processes and whose they are; here the loop decides which of
// them the queue does not own, keeps those GPUs out of the schedule, looks afresh before it gives
// GPUs out, and says what it found in its log, on the page and in /metrics.
#include <fmt/format.h>

#include "daemon/daemon.h"
#include "daemon/store.h"

namespace gpurun::queue {
namespace {

// A list of the GPUs' processes at most this old counts as a look before GPUs are given out;
// an older one is refreshed first (one nvidia-smi or NVML call), so a process that appeared since
// the last periodic sample is not missed.
constexpr int64_t kFreshLookMs = 2000;

std::string describe(const UsageSampler::GpuUse& u) {
  std::string who = u.user.empty() ? "user unknown" : u.user;
  if (!u.command.empty()) who += ", " + u.command;
  if (u.job_id) who += fmt::format(", of job {}", u.job_id);
  return fmt::format("pid {} ({})", u.process.pid, who);
}

}  // namespace

GpuWatch::Holders Daemon::gpu_holders() const {
  GpuWatch::Holders holders;
  for (const auto& [id, j] : jobs_->active())
    if (j.state == JobState::kRunning)
      for (int g : j.gpus) holders[g].push_back(id);
  return holders;
}

void Daemon::watch_gpus(const UsageSampler::Tick& t) {
  if (!watch_.sampled()) dirty_ = true;  // starts held back for the first sample may go now
  for (int gpu : watch_.on_sample(t, gpu_holders())) {
    const auto& uses = watch_.outside(gpu);
    std::string who;
    for (const auto& u : uses) who += (who.empty() ? "" : "; ") + describe(u);
    if (uses.empty())
      fmt::print(stderr, "gpuq daemon: GPU {}: no longer used outside the queue\n", gpu);
    else
      fmt::print(stderr, "gpuq daemon: GPU {}: used outside the queue by {}{}\n", gpu, who,
                 watch_.config().avoid_outside ? "; not given out while it is" : "");
    dirty_ = true;
  }
  if (look_requested_ms_) dirty_ = true;  // the look a start waits for may have come
}

bool Daemon::outside_use_checked(int64_t now) {
  if (sampler_ && watch_.config().avoid_outside && !watch_.sampled())
    return false;  // a daemon just started: its first sample, taken at once, comes first
  if (!sampler_ || !watch_.config().avoid_outside || !watch_.processes_known()) {
    look_requested_ms_ = 0;
    return true;  // no list to be had: nothing is kept out (README, "GPUs used outside gpuq")
  }
  const int64_t seen = watch_.processes_ms();
  if (now - seen <= kFreshLookMs || (look_requested_ms_ && seen >= look_requested_ms_)) {
    look_requested_ms_ = 0;
    return true;
  }
  if (!look_requested_ms_) {
    look_requested_ms_ = now;
    sampler_->sample_soon();
  }
  return false;
}

void Daemon::restore_idle_runs() {
  for (const auto& [id, j] : jobs_->active()) {
    if (j.state != JobState::kRunning) continue;
    std::map<int, std::vector<std::pair<int64_t, std::optional<double>>>> utils;
    for (const auto& s : store_->job_samples(id)) utils[s.gpu].push_back({s.time_ms, s.util});
    for (int g : j.gpus)
      if (auto since = low_run_start(utils[g], watch_.config().idle_percent))
        watch_.restore_low(g, id, *since);
  }
}

nlohmann::json Daemon::outside_json(int gpu) const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& u : watch_.outside(gpu))
    out.push_back({{"pid", u.process.pid},
                   {"user", u.user},
                   {"command", u.command},
                   {"job_id", u.job_id},
                   {"mem_used_mib", u.process.used_mib ? nlohmann::json(*u.process.used_mib)
                                                       : nlohmann::json(nullptr)}});
  return out;
}

}  // namespace gpurun::queue

// gpuq daemon: shared GPUs (--shards-per-gpu, --mps; issue 30, item 1). The scheduler places
// shard jobs (scheduler.h); here are each GPU's shards and the MPS daemons of shared GPUs.
#include <algorithm>

#include "daemon/daemon.h"

namespace gpurun::queue {

int Daemon::shards_of(int gpu) const {
  auto it = cfg_.shards_per_gpu.find(gpu);
  return it == cfg_.shards_per_gpu.end() ? 0 : it->second;
}

int Daemon::most_shards() const {
  int most = 0;
  for (const auto& [gpu, n] : cfg_.shards_per_gpu) most = std::max(most, n);
  return most;
}

void Daemon::mps_for(const Job& j, std::map<std::string, std::string>& env) {
  if (!mps_.on() || !j.shards || j.gpus.empty() || !j.shards_per_gpu) return;
  const int gpu = j.gpus[0];
  if (mps_gpus_.insert(gpu).second) mps_.start(gpu);
  for (auto& [k, v] : mps_.job_env(gpu, std::max(1, 100 * j.shards / j.shards_per_gpu)))
    env[k] = v;
}

void Daemon::mps_release() {
  std::set<int> shared;
  for (const auto& [id, j] : jobs_->active())
    if (j.state == JobState::kRunning && j.shards)
      shared.insert(j.gpus.begin(), j.gpus.end());
  if (recovering_) {  // a restarted daemon: the MPS daemons of shared GPUs kept running
    if (mps_.on()) mps_gpus_ = shared;
    return;
  }
  for (auto it = mps_gpus_.begin(); it != mps_gpus_.end();) {
    if (shared.count(*it)) {
      ++it;
      continue;
    }
    mps_.stop(*it);
    it = mps_gpus_.erase(it);
  }
}

}  // namespace gpurun::queue

// The daemon's count of GPU time (accounting.h).
#include "daemon/accounting.h"

#include <algorithm>

#include "daemon/store.h"
#include "gpurun/queue/scheduler.h"

namespace gpurun::queue {

Accounting::Accounting(Store& store, int64_t half_life_s)
    : store_(store), half_life_ms_(half_life_s * 1000) {
  for (const auto& [uid, u] : store_.load_usage()) usage_[uid] = {u.gpu_seconds, u.updated_ms};
  finished_gpu_seconds_ = store_.finished_gpu_seconds_by_user();
}

void Accounting::charge(const Job& j, int64_t end_ms, int64_t now) {
  const double used = gpu_seconds(j, end_ms);
  finished_gpu_seconds_[j.user] += used;
  if (j.gpus.empty()) return;
  auto& u = usage_[j.uid];
  u.gpu_seconds = decay_usage(u.gpu_seconds, now - u.updated_ms, half_life_ms_) + used;
  u.updated_ms = now;
  store_.save_usage(j.uid, {u.gpu_seconds, u.updated_ms});
}

std::map<uint32_t, double> Accounting::decayed(const JobTable& jobs, int64_t now) const {
  std::map<uint32_t, double> out;
  for (const auto& [uid, u] : usage_)
    out[uid] = decay_usage(u.gpu_seconds, now - u.updated_ms, half_life_ms_);
  for (const auto& [id, j] : jobs.active())
    if (j.state == JobState::kRunning)
      out[j.uid] += j.gpus.size() * std::max<int64_t>(0, now - j.start_ms) / 1000.0;
  return out;
}

std::map<std::string, double> Accounting::gpu_seconds_by_user(const JobTable& jobs, int64_t now) {
  std::map<std::string, double> seconds = finished_gpu_seconds_;
  for (const auto& [id, j] : jobs.active())
    if (j.state == JobState::kRunning) seconds[j.user] += gpu_seconds(j, now);
  for (auto& [user, s] : seconds) s = std::max(s, said_gpu_seconds_[user]);
  said_gpu_seconds_ = seconds;
  return seconds;
}

std::vector<std::string> Accounting::violations() const {
  const auto stored = store_.load_usage();
  bool same = stored.size() == usage_.size();
  for (const auto& [uid, u] : usage_) {
    auto it = stored.find(uid);
    same = same && it != stored.end() && it->second.gpu_seconds == u.gpu_seconds &&
           it->second.updated_ms == u.updated_ms;
  }
  if (same) return {};
  return {"8: the fair-share usage differs from the store's"};
}

}  // namespace gpurun::queue

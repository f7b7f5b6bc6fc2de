// gpu_watch.cc: see gpu_watch.h.
#include "daemon/gpu_watch.h"

#include <algorithm>

namespace gpurun::queue {

std::set<int> GpuWatch::on_sample(const UsageSampler::Tick& t, const Holders& holders) {
  std::set<int> changed;
  sampled_ = true;
  if (t.gpus) track_low(*t.gpus, t.time_ms, holders);
  // A sample that failed, or could not list the processes, tells nothing of them: the GPUs last
  // seen used outside stay out, and nothing waits for a fresh look that cannot come.
  known_ = t.gpus && t.gpus->processes_read;
  if (!known_) return changed;
  processes_ms_ = t.time_ms;
  std::map<int, std::vector<UsageSampler::GpuUse>> outside;
  for (const auto& u : t.gpu_uses) {
    auto h = holders.find(u.process.gpu);
    bool owned = u.job_id && h != holders.end() &&
                 std::find(h->second.begin(), h->second.end(), u.job_id) != h->second.end();
    if (!owned && u.process.gpu >= 0) outside[u.process.gpu].push_back(u);
  }
  for (const auto& [gpu, uses] : outside)
    if (!outside_.count(gpu)) changed.insert(gpu);
  for (const auto& [gpu, uses] : outside_)
    if (!outside.count(gpu)) changed.insert(gpu);
  outside_ = std::move(outside);
  return changed;
}

void GpuWatch::track_low(const gpuinfo::GpuSnapshot& s, int64_t time_ms, const Holders& holders) {
  std::map<int, Low> low;
  for (const auto& [gpu, jobs] : holders) {
    if (jobs.size() != 1) continue;
    const int64_t job = jobs[0];
    auto was = low_.find(gpu);
    bool same_job = was != low_.end() && was->second.job == job;
    const gpuinfo::GpuSample* g = s.gpu(gpu);
    if (!g || !g->util_percent) {  // no figure: the run neither breaks nor starts
      if (same_job) low[gpu] = was->second;
      continue;
    }
    if (*g->util_percent >= cfg_.idle_percent) continue;
    low[gpu] = same_job ? was->second : Low{job, time_ms};
  }
  low_ = std::move(low);
}

const std::vector<UsageSampler::GpuUse>& GpuWatch::outside(int gpu) const {
  static const std::vector<UsageSampler::GpuUse> kNone;
  auto it = outside_.find(gpu);
  return it == outside_.end() ? kNone : it->second;
}

std::optional<int64_t> GpuWatch::low_since(int gpu) const {
  auto it = low_.find(gpu);
  if (it == low_.end()) return std::nullopt;
  return it->second.since_ms;
}

bool GpuWatch::idle_flag(int gpu, int64_t now_ms) const {
  auto since = low_since(gpu);
  return since && now_ms - *since >= cfg_.idle_after_ms;
}

bool GpuWatch::busy_flag(int gpu, const gpuinfo::GpuSample* s, bool held) const {
  if (held) return false;
  if (!outside(gpu).empty()) return true;
  if (!s) return false;
  if (s->util_percent && *s->util_percent >= cfg_.busy_percent) return true;
  return s->mem_used_mib && s->mem_total_mib && *s->mem_total_mib > 0 &&
         100.0 * *s->mem_used_mib / *s->mem_total_mib >= cfg_.busy_percent;
}

std::optional<int64_t> low_run_start(
    const std::vector<std::pair<int64_t, std::optional<double>>>& utils, double percent) {
  std::optional<int64_t> start;
  bool seen = false;
  for (auto it = utils.rbegin(); it != utils.rend(); ++it) {
    if (!it->second) continue;
    if (*it->second >= percent) return seen ? start : std::nullopt;
    seen = true;
    start = it->first;
  }
  return start;
}

}  // namespace gpurun::queue

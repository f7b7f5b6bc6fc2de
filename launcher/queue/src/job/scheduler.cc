// Priority + fair-share ordering and EASY backfill for gpuq (scheduler.h).
#include "gpurun/queue/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpurun::queue {

double decay_usage(double value, int64_t elapsed_ms, int64_t half_life_ms) {
  if (half_life_ms <= 0 || elapsed_ms <= 0) return value;
  return value * std::exp2(-static_cast<double>(elapsed_ms) / static_cast<double>(half_life_ms));
}

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// The waiting jobs in the order they are considered: priority, then the user's fair-share usage
// (less first), then submission time and id.
std::vector<const SchedJob*> priority_order(const SchedInput& in) {
  std::vector<const SchedJob*> order;
  order.reserve(in.waiting.size());
  for (const auto& j : in.waiting) order.push_back(&j);
  auto usage_of = [&](uint32_t uid) {
    auto it = in.usage.find(uid);
    return it == in.usage.end() ? 0.0 : it->second;
  };
  std::sort(order.begin(), order.end(), [&](const SchedJob* a, const SchedJob* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    double ua = usage_of(a->uid), ub = usage_of(b->uid);
    if (ua != ub) return ua < ub;
    if (a->submit_ms != b->submit_ms) return a->submit_ms < b->submit_ms;
    return a->id < b->id;
  });
  return order;
}

// The top waiting job's reservation: walking the running jobs by expected end, when enough GPUs
// will be free for it (shadow_ms; kNever when a job without a limit stands in the way) and how
// many beyond its need will be free then (extra).
void reserve(const SchedInput& in, int free_now, int need, int64_t& shadow_ms, int& extra) {
  std::vector<SchedRunning> ends = in.running;
  std::sort(ends.begin(), ends.end(), [](const SchedRunning& a, const SchedRunning& b) {
    int64_t ea = a.end_ms ? a.end_ms : kNever, eb = b.end_ms ? b.end_ms : kNever;
    return ea < eb;
  });
  int avail = free_now;
  for (const auto& r : ends) {
    if (r.end_ms == 0) break;  // a job without a limit may run forever
    avail += r.gpus;
    if (avail >= need) {
      shadow_ms = std::max(r.end_ms, in.now_ms);
      extra = avail - need;
      return;
    }
  }
}

}  // namespace

SchedOutput schedule(const SchedInput& in) {
  SchedOutput out;
  std::vector<int> free = in.free_gpus;
  std::sort(free.begin(), free.end());
  std::map<uint32_t, int> user_gpus;
  for (const auto& r : in.running) user_gpus[r.uid] += r.gpus;

  bool have_top = false;
  int64_t shadow_ms = kNever;  // when the top job is guaranteed its GPUs
  int extra = 0;               // GPUs free at shadow time beyond what the top job needs

  auto take = [&](const SchedJob& j) {
    SchedStart s{j.id, std::vector<int>(free.begin(), free.begin() + j.gpus)};
    free.erase(free.begin(), free.begin() + j.gpus);
    user_gpus[j.uid] += j.gpus;
    out.starts.push_back(std::move(s));
  };

  for (const SchedJob* jp : priority_order(in)) {
    const SchedJob& j = *jp;
    if (in.max_gpus_per_user > 0 && j.gpus > 0 &&
        user_gpus[j.uid] + j.gpus > in.max_gpus_per_user) {
      out.reasons.emplace_back(j.id, "QOSMaxGRESPerUser");
      continue;
    }
    bool fits = static_cast<int>(free.size()) >= j.gpus;
    if (!have_top) {
      if (fits) {
        take(j);
        continue;
      }
      have_top = true;
      bool outside = static_cast<int>(free.size()) + in.gpus_outside >= j.gpus;
      out.reasons.emplace_back(j.id, outside ? "GpuBusyOutsideQueue" : "Resources");
      reserve(in, static_cast<int>(free.size()), j.gpus, shadow_ms, extra);
      continue;
    }
    if (fits) {
      bool ends_in_time = j.time_limit_s > 0 && shadow_ms != kNever &&
                          in.now_ms + j.time_limit_s * 1000 <= shadow_ms;
      if (ends_in_time) {
        take(j);
        continue;
      }
      if (j.gpus <= extra) {
        extra -= j.gpus;
        take(j);
        continue;
      }
    }
    out.reasons.emplace_back(j.id, "Priority");
  }
  return out;
}

}  // namespace gpurun::queue

// Priority + fair-share ordering and EASY backfill for gpuq (scheduler.h).
#include "gpurun/queue/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

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

namespace {

// Where jobs can go during one pass: the whole free GPUs and the shards held so far.
struct Room {
  const SchedInput& in;
  std::vector<int> free;
  std::map<int, int> held;

  // The GPU a shard job would get now: the shared GPU with the fewest shards left that fit it,
  // else the lowest free GPU that offers enough; -1 when none.
  int shard_gpu(int shards) const {
    int best = -1, best_left = std::numeric_limits<int>::max();
    for (const auto& [g, n] : held) {
      int left = total(g) - n;
      if (n > 0 && left >= shards && left < best_left) best = g, best_left = left;
    }
    if (best >= 0) return best;
    for (int g : free)
      if (total(g) >= shards) return g;
    return -1;
  }
  int total(int g) const {
    auto it = in.shards_total.find(g);
    return it == in.shards_total.end() ? 0 : it->second;
  }
  bool is_free(int g) const { return std::find(free.begin(), free.end(), g) != free.end(); }
  // The free GPUs a whole-GPU job may take, in the order it takes them.
  std::vector<int> usable(const SchedJob& j) const {
    if (j.profile.empty()) return free;
    std::vector<int> out;
    for (int g : free) {
      auto p = in.profiles.find(g);
      if (p != in.profiles.end() && p->second == j.profile) out.push_back(g);
    }
    return out;
  }
  bool fits(const SchedJob& j) const {
    return j.shards ? shard_gpu(j.shards) >= 0 : static_cast<int>(usable(j).size()) >= j.gpus;
  }
  // The whole free GPUs the job would take: its GPUs, 1 for a shard job opening a GPU, else 0.
  int whole(const SchedJob& j) const { return j.shards ? is_free(shard_gpu(j.shards)) : j.gpus; }
  std::vector<int> take(const SchedJob& j) {
    if (!j.shards) {
      std::vector<int> gpus = usable(j);
      gpus.resize(j.gpus);
      for (int g : gpus) free.erase(std::find(free.begin(), free.end(), g));
      return gpus;
    }
    int g = shard_gpu(j.shards);
    if (is_free(g)) free.erase(std::find(free.begin(), free.end(), g));
    held[g] += j.shards;
    return {g};
  }
};

}  // namespace

SchedOutput schedule(const SchedInput& in) {
  SchedOutput out;
  Room room{in, in.free_gpus, in.shards_held};
  std::sort(room.free.begin(), room.free.end());
  std::map<uint32_t, int> user_gpus;
  for (const auto& r : in.running) user_gpus[r.uid] += r.gpus;

  bool have_top = false;
  int64_t shadow_ms = kNever;  // when the top job is guaranteed its GPUs
  int extra = 0;               // GPUs free at shadow time beyond what the top job needs

  auto take = [&](const SchedJob& j) {
    out.starts.push_back({j.id, room.take(j)});
    user_gpus[j.uid] += j.gpus;
  };

  for (const SchedJob* jp : priority_order(in)) {
    const SchedJob& j = *jp;
    if (in.max_gpus_per_user > 0 && j.gpus > 0 &&
        user_gpus[j.uid] + j.gpus > in.max_gpus_per_user) {
      out.reasons.emplace_back(j.id, "QOSMaxGRESPerUser");
      continue;
    }
    const bool fits = room.fits(j);
    if (!have_top) {
      if (fits) {
        take(j);
        continue;
      }
      have_top = true;
      const int free = static_cast<int>(room.free.size());
      bool outside = !j.shards && free + in.gpus_outside >= j.gpus;
      out.reasons.emplace_back(j.id, outside ? "GpuBusyOutsideQueue" : "Resources");
      reserve(in, free, j.shards ? 1 : j.gpus, shadow_ms, extra);
      continue;
    }
    if (fits) {
      bool ends_in_time = j.time_limit_s > 0 && shadow_ms != kNever &&
                          in.now_ms + j.time_limit_s * 1000 <= shadow_ms;
      const int whole = room.whole(j);
      if (ends_in_time || whole <= extra) {
        if (!ends_in_time) extra -= whole;
        take(j);
        continue;
      }
    }
    out.reasons.emplace_back(j.id, "Priority");
  }
  return out;
}

namespace {

// GPUs free over time: a step function, as (time, change) events from now on.
struct Timeline {
  int64_t now;
  int free_now;
  std::map<int64_t, int> changes;  // time -> GPUs freed (+) or taken (-) then

  int free_at(int64_t t) const {
    int n = free_now;
    for (auto it = changes.begin(); it != changes.end() && it->first <= t; ++it) n += it->second;
    return n;
  }
  // The earliest time from which `need` GPUs stay free for `duration_ms` (0: for good).
  int64_t earliest(int need, int64_t duration_ms) const {
    std::vector<int64_t> candidates = {now};
    for (const auto& [t, d] : changes) candidates.push_back(t);
    for (int64_t t : candidates) {
      const int64_t end = duration_ms ? t + duration_ms : kNever;
      bool ok = free_at(t) >= need;
      for (auto it = changes.upper_bound(t); ok && it != changes.end() && it->first < end; ++it)
        ok = free_at(it->first) >= need;
      if (ok) return t;
    }
    return kNever;
  }
};

}  // namespace

std::vector<SchedEstimate> estimate_starts(const SchedInput& in, const SchedOutput& out) {
  std::map<int64_t, const SchedJob*> by_id;
  for (const auto& j : in.waiting) by_id[j.id] = &j;
  std::set<int> free(in.free_gpus.begin(), in.free_gpus.end());
  std::set<int64_t> started;
  Timeline tl{in.now_ms, 0, {}};
  for (const auto& r : in.running)
    if (r.end_ms) tl.changes[std::max(r.end_ms, in.now_ms)] += r.gpus;
  for (const auto& s : out.starts) {  // started in this pass: theirs now, until their limit
    const SchedJob& j = *by_id.at(s.job_id);
    started.insert(j.id);
    for (int g : s.gpus) free.erase(g);
    if (j.time_limit_s && !j.shards) tl.changes[in.now_ms + j.time_limit_s * 1000] += j.gpus;
  }
  tl.free_now = static_cast<int>(free.size());
  std::vector<SchedEstimate> est;
  int position = 0;
  for (const SchedJob* j : priority_order(in)) {
    if (started.count(j->id)) continue;
    SchedEstimate e{j->id, ++position, 0};
    if (position <= kMaxEstimates && !j->shards && j->profile.empty()) {
      // A job without a limit that gets its GPUs keeps them: the timeline never gives them back.
      const int64_t t = tl.earliest(j->gpus, j->time_limit_s * 1000);
      if (t != kNever) {
        e.start_ms = t;
        tl.changes[t] -= j->gpus;
        if (j->time_limit_s) tl.changes[t + j->time_limit_s * 1000] += j->gpus;
      }
    }
    est.push_back(e);
  }
  return est;
}

}  // namespace gpurun::queue

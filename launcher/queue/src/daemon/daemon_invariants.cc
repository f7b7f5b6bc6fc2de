// What the gpuq daemon's in-memory maps owe its store (daemon.h). The store is the truth: the maps
// exist so that scheduling, `gpuq queue` and dependency checks never scan the database. After
// recovery, and at the end of every turn of the loop (the batch committed, the turn's supervisors
// started), these hold:
//
//  1. active_ holds exactly the store's PENDING and RUNNING jobs, each with the store's state,
//     owner, GPUs, held and cancel flags, restart count, priority, start time and array ids.
//  2. load_[uid] counts uid's active jobs and the bytes of their scripts, arguments and
//     environments (the per-user submit bounds); a user without an entry has none.
//  3. states_ holds every job of the store, with its state (dependencies of finished jobs).
//  4. array_members_ maps each array id to exactly the ids of the store's tasks of that array.
//  5. array_tasks_, a cache filled per array at first use, names only members of its array.
//  6. runners_ watches only RUNNING active jobs. (A RUNNING job may lack a runner: recover()
//     leaves one whose supervisor holds its lock but wrote no status, and logs it.)
//  7. No GPU is held by two RUNNING jobs.
//  8. usage_ (fair-share GPU-seconds per user) equals the store's usage table.
//
// `gpuq daemon --check-invariants` checks them all at those points and stops with an error that
// names each broken one; the end-to-end tests run it through submits, cancels, holds, arrays,
// dependencies, requeues, restarts and kill -9 (GpuqCrash.*Invariants*).
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "daemon/daemon.h"
#include "daemon/store.h"

namespace gpurun::queue {
namespace {

// The first field in which the daemon's copy of a job differs from the store's, or nullptr.
const char* first_difference(const Job& mem, const Job& db) {
  if (mem.state != db.state) return "state";
  if (mem.uid != db.uid) return "uid";
  if (mem.gpus != db.gpus) return "gpus";
  if (mem.held != db.held) return "held";
  if (mem.cancel_requested != db.cancel_requested) return "cancel_requested";
  if (mem.restart_count != db.restart_count) return "restart_count";
  if (mem.priority != db.priority) return "priority";
  if (mem.start_ms != db.start_ms) return "start_ms";
  if (mem.array_job_id != db.array_job_id) return "array_job_id";
  if (mem.array_task_id != db.array_task_id) return "array_task_id";
  return nullptr;
}

}  // namespace

std::vector<std::string> Daemon::invariant_violations() {
  std::vector<std::string> out;
  std::map<int64_t, Job> stored;  // 1
  for (auto& j : store_->load_active()) stored.emplace(j.id, std::move(j));
  std::map<uint32_t, UserLoad> load;
  for (const auto& [id, j] : active_) {
    load[j.uid].jobs += 1;
    load[j.uid].bytes += spec_bytes(j);
    auto it = stored.find(id);
    if (it == stored.end())
      out.push_back(fmt::format("1: job {} is {} in memory but not active in the store", id,
                                state_name(j.state)));
    else if (const char* f = first_difference(j, it->second))
      out.push_back(fmt::format("1: job {}: {} differs from the store's", id, f));
  }
  for (const auto& [id, j] : stored)
    if (!active_.count(id))
      out.push_back(fmt::format("1: job {} is {} in the store but not active in memory", id,
                                state_name(j.state)));
  for (const auto& [uid, l] : load_)  // 2
    if (l.jobs != load[uid].jobs || l.bytes != load[uid].bytes)
      out.push_back(fmt::format("2: uid {} is counted {} active jobs of {} bytes, has {} of {}",
                                uid, l.jobs, l.bytes, load[uid].jobs, load[uid].bytes));
  for (const auto& [uid, l] : load)
    if (l.jobs && !load_.count(uid))
      out.push_back(fmt::format("2: uid {} has {} active jobs, counted none", uid, l.jobs));
  std::map<int64_t, JobState> states;  // 3, 4
  std::map<int64_t, std::vector<int64_t>> members;
  for (const auto& row : store_->all_states()) {
    states[row.id] = row.state;
    if (row.array_job_id) members[row.array_job_id].push_back(row.id);
  }
  if (states != states_)
    out.push_back(fmt::format("3: states_ ({} jobs) differs from the store's ({} jobs)",
                              states_.size(), states.size()));
  for (auto [array, ids] : array_members_) {
    std::sort(ids.begin(), ids.end());
    if (ids != members[array])
      out.push_back(fmt::format("4: array {} has {} members in memory, {} in the store", array,
                                ids.size(), members[array].size()));
  }
  for (const auto& [array, ids] : members)
    if (!array_members_.count(array))
      out.push_back(fmt::format("4: array {} of the store is missing in memory", array));
  for (const auto& [array, tasks] : array_tasks_)  // 5
    for (const auto& [task, id] : tasks)
      if (!std::count(members[array].begin(), members[array].end(), id))
        out.push_back(
            fmt::format("5: task {} of array {} names job {}, no member", task, array, id));
  std::map<int, int64_t> holder;  // 6, 7
  for (const auto& [id, r] : runners_) {
    auto it = active_.find(id);
    if (it == active_.end() || it->second.state != JobState::kRunning)
      out.push_back(fmt::format("6: a supervisor is watched for job {}, which is not running", id));
  }
  for (const auto& [id, j] : active_)
    for (int gpu : j.state == JobState::kRunning ? j.gpus : std::vector<int>{})
      if (!holder.emplace(gpu, id).second)
        out.push_back(fmt::format("7: GPU {} is held by jobs {} and {}", gpu, holder[gpu], id));
  const auto usage = store_->load_usage();  // 8
  bool usage_ok = usage.size() == usage_.size();
  for (const auto& [uid, u] : usage_) {
    auto it = usage.find(uid);
    usage_ok = usage_ok && it != usage.end() && it->second.gpu_seconds == u.gpu_seconds &&
               it->second.updated_ms == u.updated_ms;
  }
  if (!usage_ok) out.push_back("8: the fair-share usage differs from the store's");
  return out;
}

void Daemon::check_invariants(const char* when) {
  if (!cfg_.check_invariants) return;
  const std::vector<std::string> broken = invariant_violations();
  if (broken.empty()) return;
  std::string text;
  for (const auto& b : broken) text += fmt::format("{}  {}", text.empty() ? "" : "\n", b);
  throw std::logic_error(
      fmt::format("invariants broken {} (daemon_invariants.cc):\n{}", when, text));
}

}  // namespace gpurun::queue

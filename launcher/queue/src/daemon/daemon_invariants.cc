// What the gpuq daemon's parts owe its store (daemon.h). The store is the truth: the job table
// (job_table.h) and the accounting (accounting.h) exist so that scheduling, `gpuq queue` and
// dependency checks never scan the database. After recovery, and at the end of every turn of the
// loop (the batch committed, the turn's supervisors started), these hold:
//
//  1. The job table's active jobs are exactly the store's PENDING and RUNNING jobs, each with the
//     store's state, owner, GPUs, held and cancel flags, restart count, priority, start time and
//     array ids.
//  2. Its load of a user counts that user's active jobs and the bytes of their scripts, arguments
//     and environments (the per-user submit bounds); a user without an entry has none.
//  3. Its states hold every job of the store, with its state (dependencies of finished jobs).
//  4. Its array members map each array id to exactly the ids of the store's tasks of that array.
//  5. Its array task map, a cache filled per array at first use, names only members of its array.
//  6. runners_ watches only RUNNING active jobs. (A RUNNING job may lack a runner: recover()
//     leaves one whose supervisor holds its lock but wrote no status, and logs it.)
//  7. No GPU is held by two RUNNING jobs, except by shard jobs together, whose shards add up to at
//     most the GPU's --shards-per-gpu.
//  8. The accounting's fair-share GPU-seconds per user equal the store's usage table.
//
// 1 to 5 are checked by JobTable::violations(), 8 by Accounting::violations(), 6 and 7 here.
// `gpuq daemon --check-invariants` checks them all at those points and stops with an error that
// names each broken one; the end-to-end tests run it through submits, cancels, holds, arrays,
// dependencies, requeues, restarts and kill -9 (GpuqCrash.*Invariants*), and the job table's and
// accounting's checks have unit tests of their own (tests/queue/job_table_test.cc).
#include <fmt/format.h>

#include <stdexcept>

#include "daemon/daemon.h"
#include "daemon/store.h"

namespace gpurun::queue {

std::vector<std::string> Daemon::invariant_violations() {
  std::vector<std::string> out = jobs_->violations();
  const auto& active = jobs_->active();
  for (const auto& [id, r] : runners_) {  // 6
    auto it = active.find(id);
    if (it == active.end() || it->second.state != JobState::kRunning)
      out.push_back(fmt::format("6: a supervisor is watched for job {}, which is not running", id));
  }
  std::map<int, int64_t> holder;  // 7: whole GPUs
  std::map<int, int> shards;      // 7: shards held per GPU
  for (const auto& [id, j] : active) {
    if (j.state != JobState::kRunning) continue;
    for (int gpu : j.shards ? std::vector<int>{} : j.gpus)
      if (!holder.emplace(gpu, id).second)
        out.push_back(fmt::format("7: GPU {} is held by jobs {} and {}", gpu, holder[gpu], id));
    for (int gpu : j.shards ? j.gpus : std::vector<int>{}) shards[gpu] += j.shards;
  }
  for (const auto& [gpu, n] : shards) {
    if (holder.count(gpu))
      out.push_back(fmt::format("7: GPU {} is held by job {} and by shard jobs", gpu, holder[gpu]));
    if (n > shards_of(gpu))
      out.push_back(fmt::format("7: GPU {} has {} shards held of {}", gpu, n, shards_of(gpu)));
  }
  for (auto& v : accounting_->violations()) out.push_back(std::move(v));
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

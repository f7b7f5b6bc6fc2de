// The daemon's in-memory mirror of its store's jobs: the active (pending and running) jobs, every
// job's state, each array's members, and each user's load. It exists so that scheduling, `gpuq
// queue` and dependency checks never scan the database; the store stays the truth, and
// violations() says where this mirror differs from it (invariants 1-5, daemon_invariants.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpurun/queue/job.h"

namespace gpurun::queue {

class Store;

// What a job keeps in the daemon's memory and store beyond its fixed fields: its script,
// arguments, environment, name, account, folder and output patterns, counted against the
// per-user bound (daemon.h).
size_t spec_bytes(const Job& j);

class JobTable {
 public:
  struct UserLoad {
    size_t jobs = 0, bytes = 0;  // active jobs, and their scripts, arguments and environments
  };

  explicit JobTable(Store& store);  // reads every state and the active jobs

  // The only ways into and out of the active jobs: they keep each user's load.
  void admit(Job j);
  void retire(int64_t id);
  // A job just inserted into the store: known from now on, and active.
  void add_new(Job j);
  // `j`'s state as the store now has it (after store.update_job(j)).
  void note_state(const Job& j) { states_[j.id] = j.state; }

  Job* find(int64_t id);
  const Job* find(int64_t id) const;
  std::map<int64_t, Job>& active() { return active_; }
  const std::map<int64_t, Job>& active() const { return active_; }
  std::optional<Job> any_job(int64_t id) const;  // active, else from the store

  UserLoad load_of(uint32_t uid) const;
  const std::map<int64_t, JobState>& states() const { return states_; }
  bool exists(int64_t id) const { return states_.count(id) || array_members_.count(id); }
  const std::vector<int64_t>* array_members(int64_t array_id) const;
  // Array id and task id -> the member's job id; the array's members are read once, at its first
  // lookup (or at submit), not at every one (a 10,000-task array took 0.4 s each).
  std::optional<int64_t> array_task_member(int64_t array_id, int64_t task);
  std::vector<int> array_task_ids(int64_t array_id);
  // How many of the array's tasks are pending or running: 0 once its last one ended.
  size_t active_in_array(int64_t array_id) const;

  // Where this mirror differs from the store: invariants 1 to 5, each line led by its number.
  std::vector<std::string> violations() const;

 private:
  Store& store_;
  std::map<int64_t, Job> active_;  // pending + running, by id
  std::map<uint32_t, UserLoad> load_;
  std::map<int64_t, JobState> states_;  // every job's state, for dependencies
  std::map<int64_t, std::vector<int64_t>> array_members_;
  std::map<int64_t, std::map<int64_t, int64_t>> array_tasks_;  // array -> task -> member
  std::map<int64_t, size_t> active_per_array_;
};

}  // namespace gpurun::queue

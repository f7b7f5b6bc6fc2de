// The daemon's mirror of its store's jobs (job_table.h), and invariants 1 to 5 of
// daemon_invariants.cc: what this mirror owes the store.
#include "daemon/job_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "daemon/store.h"

namespace gpurun::queue {

size_t spec_bytes(const Job& j) {
  size_t n = j.script.size() + j.name.size() + j.account.size() + j.cwd.size() +
             j.output_pattern.size() + j.error_pattern.size();
  for (const auto& a : j.args) n += a.size();
  for (const auto& [k, v] : j.env) n += k.size() + v.size();
  return n;
}

JobTable::JobTable(Store& store) : store_(store) {
  for (const auto& row : store_.all_states()) {
    states_[row.id] = row.state;
    if (row.array_job_id) array_members_[row.array_job_id].push_back(row.id);
  }
  for (auto& j : store_.load_active()) admit(std::move(j));
}

void JobTable::admit(Job j) {
  auto& l = load_[j.uid];
  l.jobs += 1;
  l.bytes += spec_bytes(j);
  if (j.array_job_id) active_per_array_[j.array_job_id] += 1;
  const int64_t id = j.id;
  active_.emplace(id, std::move(j));
}

void JobTable::retire(int64_t id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  auto& l = load_[it->second.uid];
  l.jobs -= std::min<size_t>(l.jobs, 1);
  l.bytes -= std::min(l.bytes, spec_bytes(it->second));
  if (const int64_t array = it->second.array_job_id) {
    auto a = active_per_array_.find(array);
    if (a != active_per_array_.end() && --a->second == 0) active_per_array_.erase(a);
  }
  active_.erase(it);
}

void JobTable::add_new(Job j) {
  states_[j.id] = j.state;
  if (j.array_job_id) {
    array_members_[j.array_job_id].push_back(j.id);
    array_tasks_[j.array_job_id][j.array_task_id] = j.id;
  }
  admit(std::move(j));
}

Job* JobTable::find(int64_t id) {
  auto it = active_.find(id);
  return it == active_.end() ? nullptr : &it->second;
}

const Job* JobTable::find(int64_t id) const {
  auto it = active_.find(id);
  return it == active_.end() ? nullptr : &it->second;
}

std::optional<Job> JobTable::any_job(int64_t id) const {
  if (const Job* j = find(id)) return *j;
  return store_.load_job(id);
}

JobTable::UserLoad JobTable::load_of(uint32_t uid) const {
  auto it = load_.find(uid);
  return it == load_.end() ? UserLoad{} : it->second;
}

const std::vector<int64_t>* JobTable::array_members(int64_t array_id) const {
  auto it = array_members_.find(array_id);
  return it == array_members_.end() ? nullptr : &it->second;
}

std::optional<int64_t> JobTable::array_task_member(int64_t array_id, int64_t task) {
  auto members = array_members_.find(array_id);
  if (members == array_members_.end()) return std::nullopt;
  auto tasks = array_tasks_.find(array_id);
  if (tasks == array_tasks_.end()) {  // an array from before this daemon started
    tasks = array_tasks_.emplace(array_id, std::map<int64_t, int64_t>{}).first;
    for (int64_t m : members->second)
      if (auto job = any_job(m)) tasks->second[job->array_task_id] = m;
  }
  auto it = tasks->second.find(task);
  if (it == tasks->second.end()) return std::nullopt;
  return it->second;
}

size_t JobTable::active_in_array(int64_t array_id) const {
  auto it = active_per_array_.find(array_id);
  return it == active_per_array_.end() ? 0 : it->second;
}

std::vector<int> JobTable::array_task_ids(int64_t array_id) {
  std::vector<int> ids;
  auto members = array_members(array_id);
  if (!members || members->empty()) return ids;
  array_task_member(array_id, 0);  // loads the array's task map
  for (const auto& [task, member] : array_tasks_[array_id]) ids.push_back(static_cast<int>(task));
  return ids;
}

namespace {

// The first field in which the daemon's copy of a job differs from the store's, or nullptr.
const char* first_difference(const Job& mem, const Job& db) {
  if (mem.state != db.state) return "state";
  if (mem.uid != db.uid) return "uid";
  if (mem.gpus != db.gpus) return "gpus";
  if (mem.held != db.held) return "held";
  if (mem.cancel_requested != db.cancel_requested) return "cancel_requested";
  if (mem.requeue_requested != db.requeue_requested) return "requeue_requested";
  if (mem.restart_count != db.restart_count) return "restart_count";
  if (mem.priority != db.priority) return "priority";
  if (mem.start_ms != db.start_ms) return "start_ms";
  if (mem.array_job_id != db.array_job_id) return "array_job_id";
  if (mem.array_task_id != db.array_task_id) return "array_task_id";
  return nullptr;
}

using LoadMap = std::map<uint32_t, JobTable::UserLoad>;

// 1: the active jobs are exactly the store's, field by field; `load` gets what they add up to.
void check_active(const std::map<int64_t, Job>& active, const std::map<int64_t, Job>& stored,
                  LoadMap& load, std::vector<std::string>& out) {
  for (const auto& [id, j] : active) {
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
    if (!active.count(id))
      out.push_back(fmt::format("1: job {} is {} in the store but not active in memory", id,
                                state_name(j.state)));
}

// 2: each user's counted load is what their active jobs add up to.
void check_load(const LoadMap& counted, LoadMap& actual, std::vector<std::string>& out) {
  for (const auto& [uid, l] : counted)
    if (l.jobs != actual[uid].jobs || l.bytes != actual[uid].bytes)
      out.push_back(fmt::format("2: uid {} is counted {} active jobs of {} bytes, has {} of {}",
                                uid, l.jobs, l.bytes, actual[uid].jobs, actual[uid].bytes));
  for (const auto& [uid, l] : actual)
    if (l.jobs && !counted.count(uid))
      out.push_back(fmt::format("2: uid {} has {} active jobs, counted none", uid, l.jobs));
}

}  // namespace

std::vector<std::string> JobTable::violations() const {
  std::vector<std::string> out;
  std::map<int64_t, Job> stored;
  for (auto& j : store_.load_active()) stored.emplace(j.id, std::move(j));
  LoadMap load;
  check_active(active_, stored, load, out);
  check_load(load_, load, out);
  std::map<int64_t, JobState> states;  // 3, 4
  std::map<int64_t, std::vector<int64_t>> members;
  for (const auto& row : store_.all_states()) {
    states[row.id] = row.state;
    if (row.array_job_id) members[row.array_job_id].push_back(row.id);
  }
  if (states != states_)
    out.push_back(fmt::format("3: the states ({} jobs) differ from the store's ({} jobs)",
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
  return out;
}

}  // namespace gpurun::queue

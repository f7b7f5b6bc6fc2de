// gpuq daemon: request handlers. Every handler validates its input and throws with a message that
// names it; connections.cc turns a throw into an error reply, so a bad request never stops the daemon.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>

#include "daemon/daemon.h"
#include "daemon/store.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/terminal.h"
#include "gpurun/queue/format.h"
#include "gpurun/queue/job_json.h"
#include "gpurun/queue/sbatch.h"
#include "gpurun/queue/usage_format.h"
#include "supervise/runfiles.h"

namespace gpurun::queue {
namespace {

std::string user_name(uid_t uid, gid_t* gid) {
  const auto pw = common::passwd_entry(uid);
  if (!pw) throw std::runtime_error(fmt::format("uid {} has no passwd entry", uid));
  if (gid) *gid = pw->gid;
  return pw->name;
}

std::string basename_of(const std::string& p) {
  auto slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// "2 GPU(s)" or "3 shard(s)", for the audit lines.
std::string asked_for(const Job& j) {
  return j.shards ? fmt::format("{} shard(s)", j.shards)
                  : fmt::format("{} GPU(s)", j.gpus_requested);
}

}  // namespace

bool Daemon::may_control(const Peer& peer, const Job& j) const {
  return peer.uid == 0 || peer.uid == j.uid || peer.uid == geteuid();
}

std::string Daemon::output_path(const Job& j, JobStream which) const {
  const std::string& pat = which == JobStream::kError ? j.error_pattern : j.output_pattern;
  if (pat.empty()) return "";
  PatternVars v{j.id, j.array_job_id, j.array_task_id, j.name, j.user, host_};
  std::string p = expand_output_pattern(pat, v);
  return p[0] == '/' ? p : j.cwd + "/" + p;
}

nlohmann::json Daemon::handle(const Request& req, const Peer& peer) {
  if (!as_root_ && peer.uid != geteuid())
    throw std::runtime_error(
        fmt::format("permission denied: this gpuq daemon serves uid {} only", geteuid()));
  switch (req.op) {
    case Op::kPing:
      return {{"ok", true},
              {"gpus", cfg_.gpus},
              {"draining", draining_},
              {"host", host_},
              {"pid", getpid()}};
    case Op::kSubmit:
      return op_submit(req.submit, peer);
    case Op::kQueue:
      return op_queue(req, peer);
    case Op::kShow:
      return op_show(req, peer);
    case Op::kCancel:
      return op_cancel(req, peer);
    case Op::kHold:
      return op_hold(req, peer, true);
    case Op::kRelease:
      return op_hold(req, peer, false);
    case Op::kRequeue:
      return op_requeue(req, peer);
    case Op::kHistory:
      return op_history(req, peer);
    case Op::kDrain:
      return op_drain(peer, true);
    case Op::kResume:
      return op_drain(peer, false);
    case Op::kStatus:
      return op_status(req);
    case Op::kStats:
      return op_stats(req);
    case Op::kReport:
      return op_report(req);
    case Op::kBudget:
      return op_budget(req);
    case Op::kBudgetSet:
      return op_budget_set(req, peer);
  }
  throw std::logic_error("unhandled request op");
}

namespace {

// A submission that would take a user past their share of the daemon's memory is refused.
void check_load(size_t jobs, size_t bytes, size_t new_jobs, size_t new_bytes) {
  if (jobs + new_jobs > kMaxActiveJobsPerUser)
    throw std::invalid_argument(fmt::format(
        "this submission of {} job(s) would give you {} pending or running jobs, more than the "
        "{} gpuq keeps per user: wait for some to end, or cancel some",
        new_jobs, jobs + new_jobs, kMaxActiveJobsPerUser));
  if (bytes + new_bytes > kMaxActiveBytesPerUser)
    throw std::invalid_argument(fmt::format(
        "this submission's script, arguments and environment ({:.1f} MiB for {} job(s)) would "
        "give you more than the {} MiB gpuq keeps per user for pending and running jobs: trim "
        "the environment (env | wc -c), or submit fewer array tasks at once",
        new_bytes / 1048576.0, new_jobs, kMaxActiveBytesPerUser >> 20));
}

}  // namespace

void Daemon::log_event(const Job& j, const std::string& what) const {
  const std::string id =
      j.array_job_id ? fmt::format("{} (id {})", display_id(j), j.id) : display_id(j);
  fmt::print(stderr, "gpuq daemon: {} job {} ({}, {}): {}\n", utc_time(now_ms()), id,
             common::escape_control(j.name), common::escape_control(j.user), what);
}

// The job's options arrive parsed and bounds-checked (job/request.h: the client read the #SBATCH
// lines); what is checked here needs the daemon's state: the pool, the user, existing jobs.
nlohmann::json Daemon::op_submit(const SubmitRequest& req, const Peer& peer) {
  require_batch_script(req.script);
  const JobRequest& r = req.job;
  const std::string& key = req.submit_key;
  if (!key.empty()) {
    // A client that lost the reply (daemon killed mid-request) retries with the same key.
    if (auto id = store_->find_submit_key(key + "#0")) {
      auto prior = store_->load_job(*id);
      if (!prior || prior->uid != peer.uid)
        throw std::invalid_argument("submit key already used by another user");
      return {{"ok", true}, {"job_id", *id}, {"duplicate", true}};
    }
  }
  Job base = job_from_request(req, peer);
  check_path_lengths(base);
  std::vector<int> indices = r.array ? r.array->indices : std::vector<int>{-1};
  const JobTable::UserLoad load = jobs_->load_of(peer.uid);
  check_load(load.jobs, load.bytes, indices.size(), indices.size() * spec_bytes(base));
  std::vector<Job> jobs = insert_jobs(base, r, key, indices);
  log_event(jobs.front(),
            r.array ? fmt::format("submitted by uid {}: an array of {} tasks "
                                  "(ids {} to {}), {} each",
                                  peer.uid, jobs.size(), jobs.front().id, jobs.back().id,
                                  asked_for(base))
                    : fmt::format("submitted by uid {}, {}", peer.uid, asked_for(base)));
  const int64_t first = jobs.front().id;
  for (auto& j : jobs) jobs_->add_new(std::move(j));
  dirty_ = true;
  return {{"ok", true}, {"job_id", first}, {"tasks", indices.size()}};
}

// The job's folder and its output files' paths, once the patterns are expanded (with the
// longest id), fit PATH_MAX: checked at submission, not left to fail when the job starts.
void Daemon::check_path_lengths(const Job& base) const {
  if (base.cwd.size() > kMaxPathBytes)
    throw std::invalid_argument(
        fmt::format("the job's folder (-D and the submit folder) is {} "
                    "bytes long, more than {}",
                    base.cwd.size(), kMaxPathBytes));
  Job longest = base;
  longest.id = longest.array_job_id = std::numeric_limits<int64_t>::max();
  for (const auto& [which, option] :
       {std::pair{JobStream::kOutput, "--output"}, std::pair{JobStream::kError, "--error"}}) {
    size_t n = 0;  // %a: an array's task id, or Slurm's 4294967294 outside an array
    for (const int task : {kMaxArrayIndex, -1}) {
      longest.array_task_id = task;
      n = std::max(n, output_path(longest, which).size());
    }
    if (n > kMaxPathBytes)
      throw std::invalid_argument(
          fmt::format("{}: the file's path would be up to {} bytes long, more than {}", option, n,
                      kMaxPathBytes));
  }
}

Job Daemon::job_from_request(const SubmitRequest& req, const Peer& peer) const {
  const JobRequest& r = req.job;
  gid_t gid = 0;
  std::string user = user_name(peer.uid, &gid);
  std::string cwd = req.cwd;
  if (cwd.empty() || cwd[0] != '/') throw std::invalid_argument("cwd must be an absolute path");
  if (r.chdir) cwd = (*r.chdir)[0] == '/' ? *r.chdir : cwd + "/" + *r.chdir;
  int gpus = r.gpus.value_or(0);
  const int shards = r.shards.value_or(0);
  if (shards > most_shards())
    throw std::invalid_argument(
        most_shards() == 0
            ? fmt::format("--gres=shard:{}: this gpuq pool shares no GPU (gpuq daemon "
                          "--shards-per-gpu N offers N shards of each)",
                          shards)
            : fmt::format("--gres=shard:{}: no GPU of this pool offers {} shards (the most is {})",
                          shards, shards, most_shards()));
  if (gpus > static_cast<int>(cfg_.gpus.size()))
    throw std::invalid_argument(
        fmt::format("the job asks for {} GPUs but this gpuq pool has {} "
                    "([{}])",
                    gpus, cfg_.gpus.size(), join_ids(cfg_.gpus)));
  // A job no user may ever run would wait forever as (QOSMaxGRESPerUser).
  if (cfg_.max_gpus_per_user > 0 && gpus > cfg_.max_gpus_per_user)
    throw std::invalid_argument(
        fmt::format("the job asks for {} GPUs but a user may hold at most {} at a time "
                    "(gpuq daemon --max-gpus-per-user)",
                    gpus, cfg_.max_gpus_per_user));
  std::vector<Dependency> deps = r.dependencies.value_or(std::vector<Dependency>{});
  for (const auto& d : deps) {
    const bool exists = d.task >= 0 ? jobs_->array_task_member(d.job_id, d.task).has_value()
                                    : jobs_->exists(d.job_id);
    if (!exists)
      throw std::invalid_argument(fmt::format("job dependency problem: job {}{} does not exist",
                                              d.job_id,
                                              d.task >= 0 ? fmt::format("_{}", d.task) : ""));
  }
  // As in Slurm, where only operators set --priority: else any user could jump the queue.
  if (r.priority.value_or(0) != 0 && peer.uid != 0 && peer.uid != geteuid())
    throw std::invalid_argument(fmt::format(
        "--priority={}: only root or the user the gpuq daemon runs as may set a job's priority",
        *r.priority));
  Job base;
  base.uid = peer.uid;
  base.gid = gid;
  base.user = user;
  base.name = r.job_name.value_or(basename_of(req.script_name).substr(0, kMaxNameBytes));
  base.priority = r.priority.value_or(0);
  base.account = r.account.value_or("");
  base.mail = {r.mail_events.value_or(0), r.mail_user.value_or("")};
  base.cpus = r.cpus_per_task.value_or(1);
  base.ntasks = r.ntasks.value_or(1);
  base.gpus_requested = gpus;
  base.shards = shards;
  if (r.gpu_type && is_mig_profile(*r.gpu_type)) {
    base.mig_profile = *r.gpu_type;
    if (mig_devices_of(base.mig_profile) < std::max(gpus, 1))
      throw std::invalid_argument(fmt::format(
          "--gres=gpu:{}:{}: this gpuq pool has {} MIG device(s) of profile {}", *r.gpu_type,
          gpus, mig_devices_of(base.mig_profile), base.mig_profile));
  }
  base.time_limit_s = r.time_limit_s.value_or(0);
  base.held = r.hold.value_or(false);
  base.requeue = r.requeue.value_or(false);
  base.open_append = r.open_append.value_or(false);
  base.no_requeue = r.requeue && !*r.requeue;
  base.submit_ms = now_ms();
  base.dependencies = deps;
  base.signal = r.signal.value_or(SignalSpec{});
  base.script = req.script;
  base.args = req.args;
  base.cwd = cwd;
  base.umask = req.umask.value_or(022);
  base.output_pattern = r.output.value_or(r.array ? "slurm-%A_%a.out" : "slurm-%j.out");
  base.error_pattern = r.error.value_or("");
  if (req.attach) base.attach = *req.attach;
  for (const auto& [k, v] : req.env) {
    // The submitter's Slurm variables would describe another job (one they submitted from);
    // the job gets gpuq's own (spawn_supervisor).
    if (k.rfind("SLURM_", 0) == 0) continue;
    base.env[k] = v;
  }
  return base;
}

std::vector<Job> Daemon::insert_jobs(const Job& base, const JobRequest& r, const std::string& key,
                                     const std::vector<int>& indices) {
  std::vector<Job> jobs;
  Store::Txn txn(*store_);
  for (size_t i = 0; i < indices.size(); ++i) {
    Job j = base;
    j.submit_key = key.empty() ? "" : fmt::format("{}#{}", key, i);
    if (r.array) {
      j.array_task_id = indices[i];
      j.array_max_running = r.array->max_running;
      j.array_job_id = jobs.empty() ? 0 : jobs.front().id;
      j.array = array_shape(indices);
    }
    store_->insert_job(j);
    if (r.array && jobs.empty()) {
      j.array_job_id = j.id;  // the array is named after its first task's id
      store_->update_job(j);
    }
    jobs.push_back(std::move(j));
  }
  txn.commit();
  return jobs;
}

std::string Daemon::pending_reason(const Job& j) const {
  if (j.held) return "JobHeldUser";
  if (draining_) return "ReqNodeNotAvail";
  return j.sched_reason ? j.sched_reason : "None";
}

nlohmann::json Daemon::op_queue(const Request& req, const Peer& peer) {
  const std::set<std::string> users(req.users.begin(), req.users.end());
  const int64_t now = now_ms();
  // -j (an array's id names its tasks), -t and -u.
  const std::set<int64_t> ids = resolve_listed(req.ids);
  const auto shown = [&](const Job& j) {
    const std::string state = j.completing(now) ? "COMPLETING" : state_name(j.state);
    return (users.empty() || users.count(j.user)) && (req.ids.empty() || ids.count(j.id)) &&
           (req.states.empty() ||
            std::find(req.states.begin(), req.states.end(), state) != req.states.end());
  };
  if (req.text) {
    std::vector<QueueRow> rows;
    rows.reserve(jobs_->active().size());
    for (const auto& [id, j] : jobs_->active()) {
      if (!shown(j)) continue;
      QueueRow r;
      r.id = display_id(j);
      r.name = j.name;
      r.user = j.user;
      r.running = j.state == JobState::kRunning;
      r.completing = j.completing(now);
      if (!r.running) r.reason = pending_reason(j);
      r.position = j.position;
      r.expected_start_ms = j.expected_start_ms;
      r.nodelist = host_;
      r.elapsed_s = r.running ? std::max<int64_t>(0, (now - j.start_ms) / 1000) : 0;
      r.time_limit_s = j.time_limit_s;
      r.gpus_requested = j.gpus_requested;
      r.gpus = j.gpus;
      rows.push_back(std::move(r));
    }
    auto fmt_kind = req.start     ? QueueFormat::kStart
                    : req.long_format ? QueueFormat::kLong
                                      : QueueFormat::kDefault;
    // "filtered": this daemon applied -j, -t and -u lists (a client asking an older one knows).
    return {{"ok", true}, {"text", format_queue(rows, fmt_kind, req.header)}, {"filtered", true}};
  }
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& [id, j] : jobs_->active()) {
    if (!shown(j)) continue;
    auto o = job_to_json(j, may_control(peer, j) ? JobView::kOwner : JobView::kPublic);
    o["completing"] = j.completing(now);
    if (j.state == JobState::kPending) o["reason"] = pending_reason(j);
    o["nodelist"] = host_;
    jobs.push_back(std::move(o));
  }
  return {{"ok", true}, {"jobs", std::move(jobs)}, {"now_ms", now}, {"filtered", true}};
}

std::set<int64_t> Daemon::resolve_listed(const std::vector<JobRef>& refs) {
  std::vector<JobRef> known;  // each once; with several, those naming no job left out
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const JobRef& ref : refs) {
    if (!seen.insert({ref.id, ref.task.value_or(-1)}).second) continue;
    const bool exists = ref.task ? jobs_->array_task_member(ref.id, *ref.task).has_value()
                                 : jobs_->array_members(ref.id) || jobs_->states().count(ref.id);
    if (exists || refs.size() == 1) known.push_back(ref);  // one unknown id: resolve_ids says so
  }
  const std::vector<int64_t> ids = resolve_ids(known);  // at most kMaxIdsPerRequest
  return {ids.begin(), ids.end()};
}

std::vector<int64_t> Daemon::resolve_ids(const std::vector<JobRef>& refs,
                                         std::set<int64_t>* via_array,
                                         std::vector<JobRef>* unknown) {
  std::vector<int64_t> out;
  for (const JobRef& ref : refs) {
    const std::vector<int64_t>* members = jobs_->array_members(ref.id);
    std::optional<int64_t> member =
        ref.task ? jobs_->array_task_member(ref.id, *ref.task) : std::nullopt;
    if (member) {
      out.push_back(*member);
    } else if (members && !ref.task) {
      out.insert(out.end(), members->begin(), members->end());
      if (via_array) via_array->insert(members->begin(), members->end());
    } else if (!ref.task && jobs_->states().count(ref.id)) {
      out.push_back(ref.id);
    } else if (unknown && (unknown->size() + 1 < refs.size() || !out.empty())) {
      unknown->push_back(ref);
    } else {
      throw std::invalid_argument(fmt::format("invalid job id '{}'", id_for_message(ref.text)));
    }
    if (out.size() > kMaxIdsPerRequest)
      throw std::invalid_argument(
          fmt::format("the request names more than {} jobs: one request may name at most {} "
                      "jobs (an array counts as its tasks); ask for fewer at once",
                      kMaxIdsPerRequest, kMaxIdsPerRequest));
  }
  return out;
}

nlohmann::json Daemon::op_show(const Request& req, const Peer& peer) {
  const int64_t now = now_ms();
  nlohmann::json jobs = nlohmann::json::array();
  const std::set<int64_t> ids = resolve_listed(req.ids);
  // Environment and script come with one job only (`gpuq show ID`): 10,000 of them would make
  // a reply of hundreds of MB.
  const JobView own = req.brief || ids.size() != 1 ? JobView::kOwner : JobView::kFull;
  for (int64_t id : ids) {
    std::optional<Job> j = jobs_->any_job(id);
    if (!j) continue;
    bool mine = may_control(peer, *j);
    auto o = job_to_json(*j, mine ? own : JobView::kPublic);
    o["completing"] = j->completing(now);
    if (j->state == JobState::kPending) {
      o["reason"] = pending_reason(*j);
      o["position"] = j->position;
      o["expected_start_ms"] = j->expected_start_ms;
    }
    o["nodelist"] = host_;
    o["may_read"] = mine;
    if (mine) {
      o["stdout_path"] = output_path(*j, JobStream::kOutput);
      o["stderr_path"] = j->error_pattern.empty()
                             ? o["stdout_path"]
                             : nlohmann::json(output_path(*j, JobStream::kError));
    }
    jobs.push_back(std::move(o));
  }
  return {{"ok", true}, {"jobs", std::move(jobs)}};
}

std::string Daemon::shown_id(int64_t id) const {
  if (const Job* active = jobs_->find(id)) return display_id(*active);
  const std::optional<Job> done = jobs_->any_job(id);  // from the store
  return done ? display_id(*done) : std::to_string(id);
}

void Daemon::add_result(nlohmann::json& results, int64_t id, const std::string& shown,
                        const std::string& err) const {
  results.push_back({{"job_id", id}, {"display_id", shown}, {"ok", err.empty()}, {"error", err}});
}

void Daemon::add_unknown_results(nlohmann::json& results,
                                 const std::vector<JobRef>& unknown) const {
  for (const JobRef& ref : unknown)
    add_result(results, 0, id_for_message(ref.text), "invalid job id (no such job)");  // no id
}

nlohmann::json Daemon::results_reply(const std::vector<JobRef>& refs, nlohmann::json& results,
                                     const char* untouched) const {
  std::set<int64_t> answered;
  for (const auto& r : results) answered.insert(r["job_id"].get<int64_t>());
  for (const JobRef& ref : refs) {
    const std::vector<int64_t>* tasks = ref.task ? nullptr : jobs_->array_members(ref.id);
    if (!tasks || std::any_of(tasks->begin(), tasks->end(),
                              [&](int64_t t) { return answered.count(t); }))
      continue;
    // An array's id that reached none of its tasks did nothing: scancel and scontrol say so.
    results.push_back({{"job_id", ref.id},
                       {"display_id", std::to_string(ref.id)},
                       {"ok", false},
                       {"error", untouched}});
  }
  bool all_ok = true;
  for (const auto& r : results) all_ok = all_ok && r["ok"].get<bool>();
  return {{"ok", true}, {"all_ok", all_ok}, {"results", results}};
}

nlohmann::json Daemon::op_cancel(const Request& req, const Peer& peer) {
  const int sig = req.signal;  // 0-64, checked by the decoder
  nlohmann::json results = nlohmann::json::array();
  std::set<int64_t> via_array;
  std::vector<JobRef> unknown;
  for (int64_t id : resolve_ids(req.ids, &via_array, &unknown)) {
    Job* active = jobs_->find(id);
    if (!active && via_array.count(id)) continue;  // an array's finished tasks: nothing to do
    const std::string shown = shown_id(id);
    std::string err;
    if (!active) {
      err = fmt::format("job {} has already finished", shown);
    } else if (!may_control(peer, *active)) {
      err = fmt::format("permission denied: job {} belongs to {}", shown, active->user);
    } else {
      Job& j = *active;
      if (sig != 0) {
        auto r = runners_.find(id);
        if (j.state != JobState::kRunning || r == runners_.end()) {
          err = fmt::format("job {} is not running", shown);
        } else {
          sigval v{};
          v.sival_int = sig;
          sigqueue(r->second.pid, SIGUSR1, v);
          log_event(j, fmt::format("signal {} sent by uid {}", signal_name(sig), peer.uid));
        }
      } else if (j.state == JobState::kPending) {
        log_event(j, fmt::format("cancelled by uid {} while pending", peer.uid));
        finish(j, JobState::kCancelled, 0, 0, now_ms(), fmt::format("CANCELLED by {}", peer.uid));
      } else {
        log_event(j, fmt::format("cancel requested by uid {}", peer.uid));
        j.cancel_requested = true;
        j.reason = fmt::format("CANCELLED by {}", peer.uid);
        store_->update_job(j);  // durable first: a restarted daemon re-sends the cancel
        auto r = runners_.find(id);
        if (r != runners_.end()) ::kill(r->second.pid, SIGTERM);
      }
    }
    add_result(results, id, shown, err);
  }
  add_unknown_results(results, unknown);
  return results_reply(req.ids, results,
                       sig ? "no task of the array is running"
                           : "every task of the array has finished");
}

nlohmann::json Daemon::op_hold(const Request& req, const Peer& peer, bool hold) {
  nlohmann::json results = nlohmann::json::array();
  std::set<int64_t> via_array;
  std::vector<JobRef> unknown;
  for (int64_t id : resolve_ids(req.ids, &via_array, &unknown)) {
    Job* j = jobs_->find(id);
    if ((!j || j->state != JobState::kPending) && via_array.count(id))
      continue;  // an array's tasks that already started or ended
    const std::string shown = shown_id(id);
    std::string err;
    if (j && !may_control(peer, *j))  // whose job first: its state is the owner's business
      err = fmt::format("permission denied: job {} belongs to {}", shown, j->user);
    else if (!j || j->state != JobState::kPending)
      err = fmt::format("job {} is not pending", shown);
    else if (j->held != hold) {
      j->held = hold;
      store_->update_job(*j);
      dirty_ = true;
    }
    add_result(results, id, shown, err);
  }
  add_unknown_results(results, unknown);
  return results_reply(req.ids, results, "no task of the array is pending");
}

nlohmann::json Daemon::op_history(const Request& req, const Peer& peer) {
  std::set<uint32_t> uids;  // whose jobs (empty: everyone's)
  for (const std::string& name : req.users) {
    const auto pw = common::passwd_entry(name);
    if (!pw)
      throw std::invalid_argument(fmt::format("unknown user '{}'", common::escape_control(name)));
    uids.insert(pw->uid);
  }
  // A reply holds at most kMaxHistoryJobs documents (the newest); `total` says how many exist.
  const size_t limit = req.limit == 0 ? kMaxHistoryJobs : std::min(req.limit, kMaxHistoryJobs);
  if (!req.ids.empty()) return history_of(req, peer, uids, limit);  // -j: anyone's unless -u
  if (uids.empty() && !req.all_users && peer.uid != 0) uids.insert(peer.uid);  // one's own
  const std::vector<uint32_t> whose(uids.begin(), uids.end());
  nlohmann::json jobs = nlohmann::json::array();
  for (const Job& j : store_->history(whose, limit))
    jobs.push_back(job_to_json(j, may_control(peer, j) ? JobView::kOwner : JobView::kPublic));
  return {{"ok", true},
          {"jobs", std::move(jobs)},
          {"total", store_->count_finished(whose)},
          {"filtered", true}};
}

// history -j: the named jobs that have finished, whoever owns them (as `show` would show them)
// or only `uids`' (-u), the newest `limit`, oldest first as history lists them; those still
// pending or running are named in "active".
nlohmann::json Daemon::history_of(const Request& req, const Peer& peer,
                                  const std::set<uint32_t>& uids, size_t limit) {
  std::vector<Job> done;
  nlohmann::json active = nlohmann::json::array();
  for (int64_t id : resolve_listed(req.ids)) {
    std::optional<Job> j = jobs_->any_job(id);
    if (!j || (!uids.empty() && !uids.count(j->uid))) continue;
    if (is_final(j->state))
      done.push_back(std::move(*j));
    else
      active.push_back(display_id(*j));
  }
  const int64_t total = int64_t(done.size());
  if (done.size() > limit) done.erase(done.begin(), done.end() - long(limit));  // the newest
  nlohmann::json jobs = nlohmann::json::array();
  for (const Job& j : done)
    jobs.push_back(job_to_json(j, may_control(peer, j) ? JobView::kOwner : JobView::kPublic));
  return {{"ok", true}, {"jobs", std::move(jobs)}, {"total", total}, {"active", active},
          {"filtered", true}};
}

nlohmann::json Daemon::op_drain(const Peer& peer, bool drain) {
  if (peer.uid != 0 && peer.uid != geteuid())
    throw std::runtime_error(
        "permission denied: only root (or the daemon's owner) may drain or resume");
  draining_ = drain;
  store_->set_meta("draining", drain ? "1" : "0");
  dirty_ = true;
  return {{"ok", true}, {"draining", draining_}};
}

}  // namespace gpurun::queue

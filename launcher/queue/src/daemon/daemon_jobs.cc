// gpuq daemon: starting, watching, adopting and finishing jobs, and the scheduling pass.
//
// Crash-safety protocol (see runfiles.h for the files):
//   dispatch: commit RUNNING + GPUs -> write N.spec -> take N.lock -> spawn the supervisor (which
//             inherits the lock) -> the supervisor writes N.status "running" before it forks the
//             job.
//   restart:  a RUNNING job whose lock is still held has a live supervisor: adopt it (pidfd). If
//   the
//             lock is free, the supervisor is gone: a "done" status says how the job ended; a
//             "running" status means it died mid-job, so every process of the job is killed before
//             its GPUs are released (NODE_FAIL, or back to the queue with --requeue); no status
//             means the job never started, so it simply waits again.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>

#include "daemon/daemon.h"
#include "daemon/store.h"
#include "gpurun/common/atomic_file.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/terminal.h"
#include "gpurun/queue/format.h"
#include "gpurun/queue/scheduler.h"
#include "supervise/attach.h"
#include "supervise/runfiles.h"
#include "supervise/supervisor_spec.h"

extern char** environ;

namespace gpurun::queue {
namespace {

void remove_run_files(const std::string& run_dir, int64_t id) {
  auto p = run_paths(run_dir, id);
  ::unlink(p.spec.c_str());
  ::unlink(p.status.c_str());
  common::remove_dead_temp_files(p.status);  // a supervisor killed while writing its status
  ::unlink(p.lock.c_str());
}

}  // namespace

void Daemon::remove_cleanup_files() {
  // Removing a job's run files before its new state is durable would let a crash in between make
  // a finished job look never-started (and run it again), so this runs after each commit.
  for (int64_t id : cleanup_) {
    const Job* j = jobs_->find(id);
    if (j && j->state == JobState::kRunning) continue;  // restarted
    remove_run_files(run_dir_, id);
  }
  cleanup_.clear();
}

const char* Daemon::dependency_reason(const Job& j) const {
  for (const auto& d : j.dependencies) {
    std::vector<int64_t> ids{d.job_id};
    if (d.task >= 0) {  // ID_T: that task alone
      const std::optional<int64_t> task = jobs_->array_task_member(d.job_id, d.task);
      if (!task) return "DependencyNeverSatisfied";
      ids = {*task};
    } else if (auto members = jobs_->array_members(d.job_id)) {
      ids = *members;  // the whole array
    }
    const auto& states = jobs_->states();
    for (int64_t id : ids) {
      auto it = states.find(id);
      if (it == states.end()) return "DependencyNeverSatisfied";
      if (!is_final(it->second)) return "Dependency";
      bool ok = it->second == JobState::kCompleted;
      if ((d.kind == DepKind::kAfterOk && !ok) || (d.kind == DepKind::kAfterNotOk && ok))
        return "DependencyNeverSatisfied";  // Slurm leaves such jobs pending for good
    }
  }
  return nullptr;
}

void Daemon::schedule_pass() {
  const int64_t now = now_ms();
  mps_release();
  std::set<int> busy;
  SchedInput in;
  in.now_ms = now;
  in.max_gpus_per_user = cfg_.max_gpus_per_user;
  std::map<int64_t, int> array_busy;  // array id -> tasks running or offered in this pass
  std::optional<std::vector<BudgetUse>> budgets;  // read once, when a job may need them
  for (const auto& [id, j] : jobs_->active()) {
    if (j.state != JobState::kRunning) continue;
    busy.insert(j.gpus.begin(), j.gpus.end());
    for (int g : j.shards ? j.gpus : std::vector<int>{}) in.shards_held[g] += j.shards;
    in.running.push_back({j.shards ? 0 : static_cast<int>(j.gpus.size()), j.uid,
                          j.time_limit_s ? j.start_ms + j.time_limit_s * 1000 : 0});
    if (j.array_job_id) array_busy[j.array_job_id] += 1;
  }
  for (int g : cfg_.gpus) {
    if (watch_.keeps_out(g)) {
      in.gpus_outside += !busy.count(g);
      continue;
    }
    if (shards_of(g)) in.shards_total[g] = shards_of(g);
    if (cfg_.mig.count(g)) in.profiles[g] = cfg_.mig.at(g).name;
    if (!busy.count(g)) in.free_gpus.push_back(g);
  }
  for (auto& [id, j] : jobs_->active()) {
    if (j.state != JobState::kPending) continue;
    j.sched_reason = nullptr;
    j.position = 0;
    j.expected_start_ms = 0;
    if (draining_) continue;  // pending_reason() says why
    if (j.held) continue;
    const char* why = dependency_reason(j);
    if (!why) {
      if (!budgets) budgets = budget_uses(now);
      why = budget_reason(j, *budgets);
    }
    if (why) {
      j.sched_reason = why;
      continue;
    }
    if (j.array_job_id && j.array_max_running) {
      // Only the first (cap - running) tasks are offered, so one pass cannot exceed the cap.
      int& n = array_busy[j.array_job_id];
      if (n >= j.array_max_running) {
        j.sched_reason = "JobArrayTaskLimit";
        continue;
      }
      n += 1;
    }
    in.waiting.push_back({id, j.uid, j.priority, j.gpus_requested, j.time_limit_s, j.submit_ms,
                          j.shards, j.mig_profile});
  }
  if (in.waiting.empty()) return;
  in.usage = accounting_->decayed(*jobs_, now);
  SchedOutput out = schedule(in);
  for (auto& [id, r] : out.reasons) jobs_->active().at(id).sched_reason = r;
  for (const auto& e : estimate_starts(in, out)) {
    Job& w = jobs_->active().at(e.job_id);
    w.position = e.position;
    w.expected_start_ms = e.start_ms;
  }
  if (!out.starts.empty() && !outside_use_checked(now)) return;  // after a fresh look
  for (const auto& s : out.starts) {
    Job* j = jobs_->find(s.job_id);
    if (!j) continue;
    // Jobs that start together count against each other's budgets, in the scheduler's order
    // (a job that only waits holds no budget back).
    if (budgets) {
      if (const char* why = budget_reason(*j, *budgets)) {
        j->sched_reason = why;
        continue;
      }
      reserve_budget(*j, *budgets);
    }
    mark_running(*j, s.gpus);
    to_spawn_.push_back(s.job_id);
  }
}

// A client killed while its job waits used to keep the job's place until its turn came, and the
// supervisor then cancelled it unrun: meanwhile it held back others' positions and expected
// starts. Its listening socket is gone from /proc/net/unix as soon as the client is.
void Daemon::cancel_abandoned_runs(int64_t now) {
  if (now - runs_checked_ms_ < 2000) return;
  runs_checked_ms_ = now;
  std::vector<int64_t> waiting;
  for (const auto& [id, j] : jobs_->active())
    if (j.state == JobState::kPending && !j.attach.socket.empty()) waiting.push_back(id);
  if (waiting.empty()) return;
  std::ifstream in("/proc/net/unix");
  if (!in) return;
  const std::set<std::string> listening = listening_abstract_sockets(in);
  for (int64_t id : waiting) {
    Job* j = jobs_->find(id);
    if (!j || listening.count(j->attach.socket)) continue;
    log_event(*j, "cancelled while pending: its gpuq run client went away");
    finish(*j, JobState::kCancelled, 0, 0, now, "CANCELLED: gpuq run's client went away");
  }
}

void Daemon::mark_running(Job& j, const std::vector<int>& gpus) {
  j.state = JobState::kRunning;
  j.gpus = gpus;
  j.shards_per_gpu = j.shards && !gpus.empty() ? shards_of(gpus[0]) : 0;
  j.start_ms = now_ms();
  j.end_ms = 0;
  j.reason.clear();
  j.boot_id = boot_id_;
  j.usage = {};           // a requeued job is measured afresh, as its GPU-hours are
  j.mail_sent = 0;        // and its time-limit mails are its run's
  store_->update_job(j);  // committed before anything runs: GPUs are never handed out twice
  jobs_->note_state(j);
}

namespace {

// Slurm's variables that batch scripts read (sbatch.1 "OUTPUT ENVIRONMENT VARIABLES"), so a
// cluster script runs here unchanged. gpurun still sees a gpuq job: GPUQ_JOB_ID, which equals
// SLURM_JOB_ID here, wins over them (launcher/src/alloc/detect.cc). The node list and the tasks
// per node complete the allocation for Open MPI: once SLURM_JOBID is set, its mpirun reads the
// job's nodes and slots from them, and without them it stops before starting anything (that
// broke every `mpirun` in a job, gpurun's too).
void set_slurm_env(std::map<std::string, std::string>& env, const Job& j, const ArrayShape& a,
                   const std::string& host) {
  const std::string id = std::to_string(j.id);
  env["SLURM_JOB_ID"] = id;
  env["SLURM_JOBID"] = id;
  env["SLURM_JOB_NAME"] = j.name;
  env["SLURM_SUBMIT_DIR"] = j.cwd;
  env["SLURM_JOB_NUM_NODES"] = "1";
  env["SLURM_NNODES"] = "1";
  env["SLURM_JOB_NODELIST"] = host;
  env["SLURM_NODELIST"] = host;
  env["SLURM_TASKS_PER_NODE"] = std::to_string(j.ntasks);
  env["SLURM_NTASKS"] = std::to_string(j.ntasks);
  env["SLURM_NPROCS"] = std::to_string(j.ntasks);
  env["SLURM_CPUS_PER_TASK"] = std::to_string(j.cpus);
  env["SLURM_CPUS_ON_NODE"] = std::to_string(j.cpus * j.ntasks);
  env["SLURM_JOB_CPUS_PER_NODE"] = std::to_string(j.cpus * j.ntasks);
  env["SLURM_RESTART_COUNT"] = std::to_string(j.restart_count);
  // The batch shell is task 0 of the job's one node, as in Slurm (gpurun gives each rank its own).
  env["SLURM_PROCID"] = "0";
  env["SLURM_LOCALID"] = "0";
  env["SLURM_NODEID"] = "0";
  env["SLURM_SUBMIT_HOST"] = host;
  env["SLURMD_NODENAME"] = host;
  env["SLURM_JOB_USER"] = j.user;
  env["SLURM_JOB_UID"] = std::to_string(j.uid);
  env["SLURM_JOB_GID"] = std::to_string(j.gid);
  if (!j.account.empty()) env["SLURM_JOB_ACCOUNT"] = j.account;
  // UNIX seconds, as Slurm 23.02+ sets them; gpurun's --checkpoint-before reads the end.
  env["SLURM_JOB_START_TIME"] = std::to_string(j.start_ms / 1000);
  if (j.time_limit_s > 0)
    env["SLURM_JOB_END_TIME"] = std::to_string(j.start_ms / 1000 + j.time_limit_s);
  if (!j.gpus.empty()) {
    env["SLURM_JOB_GPUS"] = join_ids(j.gpus);
    env["SLURM_GPUS_ON_NODE"] = std::to_string(j.gpus.size());
  }
  if (j.array_job_id) {
    env["SLURM_ARRAY_JOB_ID"] = std::to_string(j.array_job_id);
    env["SLURM_ARRAY_TASK_ID"] = std::to_string(j.array_task_id);
    env["SLURM_ARRAY_TASK_MIN"] = std::to_string(a.min);
    env["SLURM_ARRAY_TASK_MAX"] = std::to_string(a.max);
    env["SLURM_ARRAY_TASK_COUNT"] = std::to_string(a.count);
    env["SLURM_ARRAY_TASK_STEP"] = std::to_string(a.step);
  }
}

// A shard job's share of its GPU: Slurm's SLURM_SHARDS_ON_NODE, and the fraction of the GPU's
// memory it may use (a framework's per-process memory fraction: PyTorch's
// torch.cuda.set_per_process_memory_fraction, TensorFlow's memory limit). Nothing enforces it
// without MPS (README, "Sharing a GPU").
void set_shard_env(std::map<std::string, std::string>& env, const Job& j) {
  env["SLURM_SHARDS_ON_NODE"] = std::to_string(j.shards);
  env["GPUQ_SHARDS"] = std::to_string(j.shards);
  env["GPUQ_SHARDS_PER_GPU"] = std::to_string(j.shards_per_gpu);
  const double fraction = j.shards_per_gpu ? double(j.shards) / j.shards_per_gpu : 1.0;
  env["GPUQ_GPU_MEMORY_FRACTION"] = fmt::format("{:.4g}", fraction);
}

}  // namespace

ArrayShape Daemon::shape_of(const Job& j) {
  if (!j.array_job_id || j.array.count > 0) return j.array;
  // A task stored before gpuq kept its array's shape: from the array's task ids.
  return array_shape(jobs_->array_task_ids(j.array_job_id));
}

void Daemon::spawn_supervisor(Job& j) {
  const std::vector<int>& gpus = j.gpus;
  std::map<std::string, std::string> env = j.env;
  std::string ids = join_ids(gpus);
  set_slurm_env(env, j, shape_of(j), host_);
  env["GPUQ_JOB_ID"] = std::to_string(j.id);
  env["GPUQ_GPUS"] = ids;
  env["GPUQ_NUM_GPUS"] = std::to_string(gpus.size());
  env["GPUQ_JOB_NAME"] = j.name;
  env["GPUQ_JOB_USER"] = j.user;
  env["GPUQ_SUBMIT_DIR"] = j.cwd;
  env["GPUQ_NODELIST"] = host_;
  env["GPUQ_RESTART_COUNT"] = std::to_string(j.restart_count);
  if (j.array_job_id) {
    env["GPUQ_ARRAY_JOB_ID"] = std::to_string(j.array_job_id);
    env["GPUQ_ARRAY_TASK_ID"] = std::to_string(j.array_task_id);
  }
  const auto path = env.find("PATH");
  env["PATH"] = bin_dir_ + ":" +
                (path != env.end() && !path->second.empty() ? path->second
                                                             : "/usr/local/bin:/usr/bin:/bin");
  env["CUDA_VISIBLE_DEVICES"] = visible_devices(gpus);  // empty for CPU-only jobs: no GPU
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  // The other ways to name GPUs, from the submitting shell, would claim GPUs the job was not
  // given: Slurm's GPU_DEVICE_ORDINAL is the job's own; AMD's and the container runtime's go.
  for (const char* other : {"GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                            "NVIDIA_VISIBLE_DEVICES"})
    env.erase(other);
  if (!gpus.empty()) env["GPU_DEVICE_ORDINAL"] = env["CUDA_VISIBLE_DEVICES"];
  if (j.shards) set_shard_env(env, j);
  mps_for(j, env);
  SupervisorSpec spec;
  spec.job_id = j.id;
  spec.uid = j.uid;
  spec.gid = j.gid;
  spec.user = j.user;
  spec.host = host_;
  spec.umask = j.umask;
  spec.cwd = j.cwd;
  spec.script_path = fmt::format("{}/{}.sh", spool_dir_, j.id);
  spec.script = j.script;
  spec.args = j.args;
  spec.env = std::move(env);
  spec.output = output_path(j, JobStream::kOutput);
  spec.error = output_path(j, JobStream::kError);
  spec.start_ms = j.start_ms;
  spec.time_limit_s = j.time_limit_s;
  spec.signal = j.signal;
  spec.kill_wait_s = cfg_.kill_wait_s;
  spec.append_output = j.open_append;
  spec.drop_privileges = as_root_;
  spec.attach = j.attach;
  RunPaths paths = run_paths(run_dir_, j.id);
  ::unlink(paths.status.c_str());
  write_spec(paths.spec, spec);
  Fd lock(::open(paths.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock || flock(lock.get(), LOCK_EX | LOCK_NB) != 0)
    throw std::runtime_error(fmt::format("cannot lock {}: {}", paths.lock, strerror(errno)));

  // posix_spawn (vfork-like) stays fast however large the daemon's memory grows.
  constexpr int kLockFdInChild = 3;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, lock.get(), kLockFdInChild);  // dup2 clears CLOEXEC
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGCHLD);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::string id_text = std::to_string(j.id), fd_text = std::to_string(kLockFdInChild);
  char* argv[] = {const_cast<char*>("gpuq"),           const_cast<char*>("__supervise"),
                  const_cast<char*>(run_dir_.c_str()), const_cast<char*>(id_text.c_str()),
                  const_cast<char*>(fd_text.c_str()),  nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, cfg_.self_exe.c_str(), &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    throw std::runtime_error(fmt::format("spawn {} __supervise: {}", cfg_.self_exe, strerror(rc)));
  watch(j.id, pid);
  mail_begin(j);
  log_event(j, j.gpus.empty() ? std::string("started (no GPU)")
                              : fmt::format("started on GPU(s) {}", ids));
}

void Daemon::watch(int64_t job_id, pid_t pid) {
  Runner r;
  r.pid = pid;
  r.pidfd = Fd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  // Without a pidfd (old kernel, or the pid already gone) the loop polls kill(pid, 0).
  runners_[job_id] = std::move(r);
}

void Daemon::reap_orphans(const SupervisorStatus& st) {
  // By session and group, each checked against the start time recorded with it: a pid reused
  // while the daemon was down belongs to a bystander, whom nothing here may signal.
  const JobProcesses job{st.supervisor_pid, st.pgid, 0, st.supervisor_start, st.pgid_start};
  const int64_t give_up = now_ms() + 10000;
  while (now_ms() < give_up) {
    if (kill_job_processes(job) == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fmt::print(stderr, "gpuq daemon: processes of session {} survive SIGKILL\n", st.supervisor_pid);
}

void Daemon::requeue_or_fail(Job& j, const std::string& why) {
  // Seen live, the run ended now. Found at start-up, it ended while no daemon watched: at its last
  // usage sample (or its start), never billed for the time the daemon or machine was down.
  const int64_t end = recovering_ ? std::max(j.start_ms, j.usage.last_sample_ms) : now_ms();
  const bool asked = j.requeue_requested && !j.cancel_requested;  // `gpuq requeue`, not undone
  if (!j.requeue && !asked) {
    finish(j, JobState::kNodeFail, 0, 0, end, why);
    return;
  }
  requeue(j, end, why);
}

// The run that ended at `end_ms` is charged and kept (Store::insert_run): reports, budgets and
// the job's GPU-hours count it; the rerun is measured afresh.
void Daemon::requeue(Job& j, int64_t end_ms, const std::string& why) {
  // One transaction (a savepoint inside the daemon's batch; its own during recovery, which runs
  // before any batch): a crash never leaves the run charged and kept with the job still RUNNING,
  // to be requeued and charged again.
  Store::Txn txn(*store_);
  accounting_->charge(j, end_ms, now_ms());
  store_->insert_run(j, end_ms);
  j.earlier_gpu_seconds += gpu_seconds(j, end_ms);
  log_event(j, fmt::format("requeued ({})", common::escape_control(why)));
  mail_requeue(j, why);
  j.state = JobState::kPending;
  j.restart_count += 1;
  j.gpus.clear();
  j.start_ms = 0;
  j.reason = why;
  j.requeue_requested = false;  // done: a later run ends as it ends, unless asked again
  store_->update_job(j);
  txn.commit();
  jobs_->note_state(j);
  cleanup_.push_back(j.id);  // only once the state change is committed
  dirty_ = true;
}

void Daemon::on_supervisor_exit(int64_t id) {
  runners_.erase(id);
  Job* running = jobs_->find(id);
  if (!running || running->state != JobState::kRunning) return;
  Job& j = *running;
  RunPaths paths = run_paths(run_dir_, id);
  auto st = read_status(paths.status);
  if (st && st->phase == "done" && j.requeue_requested && !j.cancel_requested) {
    // However the run ended (stopped for the requeue, or by itself before the stop came), it was
    // asked to go back to the queue, as scontrol requeue's jobs do. A cancel after it wins.
    requeue(j, st->end_ms ? st->end_ms : now_ms(), j.reason);  // op_requeue wrote who asked
    return;
  }
  if (st && st->phase == "done") {
    JobState state = JobState::kFailed;
    std::string reason = st->reason;
    if (st->cancelled) {
      state = JobState::kCancelled;
      if (j.reason.rfind("CANCELLED by", 0) == 0) reason = j.reason;
    } else if (st->timed_out)
      state = JobState::kTimeout;
    else if (reason.empty() && st->exit_code == 0 && st->exit_signal == 0)
      state = JobState::kCompleted;
    else if (reason.empty())
      reason = "NonZeroExitCode";
    // The supervisor's rusage is exact where samples miss processes that lived between them.
    j.usage.cpu_seconds = std::max(j.usage.cpu_seconds, st->cpu_seconds);
    j.usage.peak_rss_bytes = std::max(j.usage.peak_rss_bytes, st->max_rss_kb * 1024);
    finish(j, state, st->exit_code, st->exit_signal, st->end_ms, reason);
    return;
  }
  if (st) {  // died mid-job: nothing may survive it before its GPUs are free again
    reap_orphans(*st);
    requeue_or_fail(j, fmt::format("the supervisor of job {} died", id));
    return;
  }
  // No status: the job never started (the daemon died between committing and spawning).
  j.state = JobState::kPending;
  j.gpus.clear();
  j.start_ms = 0;
  j.requeue_requested = false;  // it is back in the queue, which is all a requeue asked
  store_->update_job(j);
  jobs_->note_state(j);
  cleanup_.push_back(id);
  dirty_ = true;
}

void Daemon::finish(Job& j, JobState state, int exit_code, int exit_signal, int64_t end_ms,
                    const std::string& reason) {
  const bool was_running = j.state == JobState::kRunning;
  j.state = state;
  j.exit_code = exit_code;
  j.exit_signal = exit_signal;
  j.end_ms = end_ms ? end_ms : now_ms();
  j.reason = reason;
  Store::Txn txn(*store_);
  store_->update_job(j);
  if (was_running) accounting_->charge(j, j.end_ms, now_ms());
  txn.commit();
  if (was_running) cleanup_.push_back(j.id);  // only once the state change is committed
  jobs_->note_state(j);
  log_event(j, fmt::format("ended {}, exit code {}{}", state_name(state),
                           exit_code_text(exit_code, exit_signal),
                           reason.empty() ? "" : ", " + common::escape_control(reason)));
  mail_end(j);
  jobs_->retire(j.id);  // j is gone from here on
  dirty_ = true;
}

void Daemon::recover() {
  recovering_ = true;
  std::vector<int64_t> running;
  for (const auto& [id, j] : jobs_->active())
    if (j.state == JobState::kRunning) running.push_back(id);
  for (int64_t id : running) {
    Job& j = jobs_->active().at(id);
    if (j.boot_id != boot_id_) {  // the machine rebooted: nothing of the job survived
      requeue_or_fail(j, "NodeFail: the machine restarted while the job ran");
      continue;
    }
    RunPaths paths = run_paths(run_dir_, id);
    Fd lock(::open(paths.lock.c_str(), O_RDWR | O_CLOEXEC));
    bool alive = lock && flock(lock.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (alive) {
      // The lock holder writes its status first thing after it starts; wait for it, or for the
      // lock to come free (the holder died). Never guess: a wrong guess would run the job twice.
      std::optional<SupervisorStatus> st;
      bool holder_gone = false;
      for (int i = 0; !(st = read_status(paths.status)); ++i) {
        if (flock(lock.get(), LOCK_EX | LOCK_NB) == 0) {
          holder_gone = true;
          break;
        }
        if (i == 3000) break;  // 60 s: a stopped supervisor must not stall the daemon forever
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (st && !holder_gone) {
        watch(id, st->supervisor_pid);
        if (j.cancel_requested)
          ::kill(st->supervisor_pid, SIGTERM);
        else if (j.requeue_requested)  // the previous daemon may have died before it stopped it
          requeue_stops_.push_back(id);
        fmt::print(stderr, "gpuq daemon: adopted running job {} (supervisor {})\n", id,
                   st->supervisor_pid);
        continue;
      }
      if (!holder_gone) {
        fmt::print(stderr,
                   "gpuq daemon: job {}: {} is held but its supervisor wrote no status; "
                   "the job stays RUNNING with its GPUs until that process ends\n",
                   id, paths.lock);
        continue;
      }
    }
    lock.reset();
    on_supervisor_exit(id);
  }
  remove_cleanup_files();
  // Leftovers of jobs that are no longer running (the daemon died while removing them).
  for (const std::string& dir : {run_dir_, spool_dir_}) {
    for (const std::string& name : common::list_dir(dir).value_or(std::vector<std::string>{})) {
      if (name[0] < '0' || name[0] > '9') continue;
      const Job* j = jobs_->find(std::atoll(name.c_str()));
      if (!j || j->state != JobState::kRunning)
        ::unlink((dir + "/" + name).c_str());
    }
  }
  mps_release();  // while recovering_: takes the shared GPUs' MPS daemons as running
  recovering_ = false;
  dirty_ = true;
}

}  // namespace gpurun::queue

// supervisor_start.cc: the Supervisor's first and last steps (supervisor.h): the program check,
// the control socket, each attempt's engine and its host file, the checkpoint deadline, whether to
// restart; at the end gpurun's exit status and --requeue.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "alloc/env_util.h"
#include "control/rank_table.h"
#include "gpurun/common/posix.h"
#include "supervisor/supervisor.h"
#include "sys/system.h"

namespace gpurun::launcher {

// A program that is missing or not executable here is refused before any engine starts: the
// ranks' nodes see the same file system in every setup gpurun knows. This node by the
// scheduler's name for it (node1 in a Slurm job), as the ranks' failures name theirs.
void Supervisor::check_program() {
  const std::string& prog = cfg_.launch.program.at(0);
  if (auto err = sys::program_error(cfg_.env, prog))
    throw proc::ExecError(prog, *err, cfg_.alloc.this_host.value_or(common::hostname()),
                          sys::working_folder_hint(prog));
}

void Supervisor::open_control() {
  // One connection per rank: thousands of ranks need more descriptors than the usual 1024.
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < static_cast<rlim_t>(world_) + 256) {
    r.rlim_cur = std::min<rlim_t>(r.rlim_max, static_cast<rlim_t>(world_) + 256);
    setrlimit(RLIMIT_NOFILE, &r);
  }
  control_ = net::listen_tcp(single_machine_, "control socket");
  control_host_ = cfg_.control_addr ? *cfg_.control_addr
                  : single_machine_ ? "127.0.0.1"
                                    : common::hostname();
}

// A fresh attempt: a new token (wrappers of an earlier one are refused), new ranks, the engine.
void Supervisor::begin_attempt() {
  token_ = proc::random_token();
  cfg_.launch.control = fmt::format("{}:{}:{}", control_host_, control_.port, token_);
  children_.clear();
  conns_.clear();
  unsent_.clear();
  conn_events_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!conn_events_)
    throw Error(fmt::format("epoll_create1 for the control connections: {}", std::strerror(errno)));
  conn_of_rank_.assign(static_cast<std::size_t>(world_), -1);
  attempt_ = Attempt(world_, cfg_.hang_timeout);
  timers_ = {};
  port_.reset();
  port_checkable_ = true;
  bw_port_ = 0;
  expect_preflight();
  if (checkpoint_at_ > 0) timers_.set(Timer::checkpoint, checkpoint_at_);
  ++attempts_;  // restarts, and attempts without a failed preflight's nodes (--nnodes)
  if (cfg_.max_restarts > 0 || cfg_.plan_options.nnodes) output_->mark_attempt(attempts_);
  start_engine();
}

void Supervisor::start_engine() {
  cfg_.plan.stdout_tty = isatty(STDOUT_FILENO) == 1;
  cfg_.launch.plan_text =
      encode_rank_table({cfg_.alloc.scheduler, cfg_.alloc.job_id, cfg_.plan, {cfg_.kill_grace}});
  cmd_ = build_launch(cfg_.alloc, cfg_.plan, cfg_.launch);
  if (restarts_ == 0)
    for (const auto& n : cmd_.notes) say(n);

  Env env = cfg_.env;
  for (const auto& [k, v] : cmd_.engine_env) env[k] = v;
  if (!cmd_.slurm_hostfile.empty()) {
    if (!hostfile_) {
      std::string text;
      for (const auto& h : cmd_.slurm_hostfile) text += h + "\n";
      hostfile_ = proc::TempFile::create("gpurun-hosts-", text, "SLURM_HOSTFILE");
    }
    env["SLURM_HOSTFILE"] = hostfile_->path();
  }
  private_mpi_session(env);
  t0_ = proc::now_seconds();
  if (cmd_.engine == Engine::fork) {
    for (int r = 0; r < world_; ++r) {
      Env e = env;
      e["GPURUN_RANK"] = std::to_string(r);
      children_.push_back(proc::Child::spawn(cmd_.wrapper, e));
    }
  } else {
    int p[2][2];
    if (pipe2(p[0], O_CLOEXEC) != 0 || pipe2(p[1], O_CLOEXEC) != 0)
      throw Error(fmt::format("pipe for the engine's output: {}", strerror(errno)));
    common::Fd w1(p[0][1]), w2(p[1][1]);
    engine_out_[0].reset(p[0][0]);
    engine_out_[1].reset(p[1][0]);
    for (auto& fd : engine_out_) fcntl(fd.get(), F_SETFL, O_NONBLOCK);
    int o = w1.get(), e = w2.get();
    children_.push_back(proc::Child::spawn(cmd_.argv, env, [o, e] {
      dup2(o, STDOUT_FILENO);
      dup2(e, STDERR_FILENO);
    }));
  }
  const RankPlan& plan = cfg_.plan;
  if (restarts_ == 0)
    say(fmt::format("{} rank{} on {} node{} via {}", world_, world_ == 1 ? "" : "s",
                    plan.nodes.size(), plan.nodes.size() == 1 ? "" : "s", to_string(cmd_.engine)));
  timers_.set(Timer::start, t0_ + cfg_.start_timeout);
}

// Open MPI 4.1's mpirun makes TMPDIR/ompi.HOST.UID and removes it when it is empty at its end:
// a second mpirun of the same user that starts at that moment fails in orte_init ("mkdir
// /tmp/ompi.HOST.UID: File exists", open-mpi/ompi#8510). Two gpuq jobs of one user meet there.
// A single-machine mpirun gets a folder of its own, kept through restarts (and removed by the
// next gpurun here when a SIGKILL left it); the user's own OMPI_MCA_orte_tmpdir_base is kept.
void Supervisor::private_mpi_session(Env& env) {
  if (cmd_.engine != Engine::mpirun || !single_machine_) return;
  if (env.count("OMPI_MCA_orte_tmpdir_base")) return;
  if (!mpi_session_)
    mpi_session_ = proc::TempDir::create_owned(std::filesystem::absolute(detail::temp_dir(env)),
                                               fmt::format("gpurun-ompi-{}-", common::hostname()),
                                               "", "mpirun's session folder");
  env["OMPI_MCA_orte_tmpdir_base"] = mpi_session_->path();
}

void Supervisor::arm_checkpoint_timer() {
  if (cfg_.checkpoint_before <= 0) return;
  std::optional<double> left = cfg_.time_left;
  std::optional<std::int64_t> end = cfg_.alloc.end_time;
  if (!left && !end && cfg_.alloc.scheduler == Scheduler::slurm && cfg_.alloc.job_id)
    end = sys::slurm_end_time(cfg_.env, *cfg_.alloc.job_id);  // Slurm 22.05 exports no end time
  if (!left && end) left = static_cast<double>(*end) - static_cast<double>(std::time(nullptr));
  if (!left) {
    say("--checkpoint-before given but the job's end time is unknown (no SLURM_JOB_END_TIME, "
        "no EndTime from scontrol; use --time-left)");
    return;
  }
  checkpoint_at_ = job_t0_ + std::max(0.0, *left - cfg_.checkpoint_before);
  say(fmt::format("{:.0f} s left in the job: {} to all ranks in {:.0f} s", *left,
                  common::signal_name(cfg_.checkpoint_signal), checkpoint_at_ - job_t0_));
}

// After an attempt: Attempt::restart decides; this says so.
// With --nnodes, a failed preflight's nodes, or the node a failure says died (node_loss.h), are
// left out of the next attempt, which runs on the rest.
bool Supervisor::should_restart() {
  if (restart_without_preflight_failures()) return true;
  switch (attempt_.restart(restarts_, cfg_.max_restarts, forwarded_stop_signal_)) {
    case Attempt::Restart::no:
      return false;
    case Attempt::Restart::no_failed_before_all_ran:
      tell(fmt::format("not restarting: rank {} failed before every rank had started",
                       attempt_.failure()->rank));
      return false;
    case Attempt::Restart::yes:
      break;
  }
  const Attempt::Failure f = *attempt_.failure();
  std::string which = fmt::format("all {} ranks", world_);
  // A dead node that cannot be left out (fewer than MIN would be left) restarts as without
  // --nnodes, on the same nodes: a rank the OOM killer took runs again there.
  if (cfg_.plan_options.nnodes)
    if (std::optional<LeftOut> dead = dead_node(attempt_); dead && leave_out({*dead})) {
      which = fmt::format("{} rank{} on the other {} node{}, without {}", world_,
                          world_ == 1 ? "" : "s", cfg_.plan.nodes.size(),
                          cfg_.plan.nodes.size() == 1 ? "" : "s", dead->host);
    }
  ++restarts_;
  tell(fmt::format("rank {} on {} {}{}: restarting {} (restart {} of {})", f.rank, f.host, f.what,
                   f.seconds >= 0 ? fmt::format(" after {:.1f} s", f.seconds) : "", which,
                   restarts_, cfg_.max_restarts));
  return true;
}

namespace {

std::string describe_wait_status(int st) {
  if (WIFSIGNALED(st))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(st),
                       common::signal_name(WTERMSIG(st)));
  return fmt::format("exited with code {}", WEXITSTATUS(st));
}

// The scheduler's own requeue command for a job, or empty when it has none we know.
// In a job array, only this task (PBS_JOBID names the subjob already: 123[4].server).
std::vector<std::string> requeue_command(const Allocation& a) {
  if (!a.job_id) return {};
  const std::string& id = a.array_task ? *a.array_task : *a.job_id;
  switch (a.scheduler) {
    case Scheduler::slurm:
      return {"scontrol", "requeue", id};
    case Scheduler::pbs:
      return {"qrerun", id};
    case Scheduler::lsf:
      return {"brequeue", id};
    case Scheduler::gpuq:  // gpuq's own scontrol requeue; an array task as N_T, as in Slurm
      return {"gpuq", "requeue", id};
    default:
      return {};
  }
}

}  // namespace

int Supervisor::result() {
  const std::optional<Attempt::Failure>& failure = attempt_.failure();
  const std::vector<int>& stopped = attempt_.stopped();
  const int running = attempt_.running_count();
  // The failed rank is no other, also when it was stopped with them (after --stop-timeout).
  const auto stopped_others = static_cast<int>(
      stopped.size() - std::count(stopped.begin(), stopped.end(), failure ? failure->rank : -1));
  if (std::string lost = output_ ? output_->failed_files() : ""; !lost.empty())
    tell(fmt::format("--output-dir: incomplete, writing them failed: {}", lost));
  if (failure && failure->rank >= 0) {
    tell(fmt::format(
        "rank {} on {} {}{}; stopped {} other rank{}{}", failure->rank, failure->host,
        failure->what,
        failure->seconds >= 0 ? fmt::format(" after {:.1f} s", failure->seconds) : "",
        stopped_others, stopped_others == 1 ? "" : "s",
        restarts_ ? fmt::format(" (after {} restart{})", restarts_, restarts_ == 1 ? "" : "s")
                  : ""));
    return failure->status;
  }
  if (failure) return failure->status;
  if (ended_by_stop_ > 0 || !ended_otherwise_.empty()) return user_stop_result();
  // No rank failed. The engine's own status still counts (it may have failed to start ranks).
  for (const auto& c : children_) {
    int st = c.status().value_or(0);
    if (proc::exit_code(st) != 0) {
      tell(fmt::format("{} {} ({} of {} ranks started)", to_string(cmd_.engine),
                       describe_wait_status(st), running, world_));
      return proc::exit_code(st);
    }
  }
  if (running < world_) {
    tell(fmt::format("{} exited but only {} of {} ranks ever started", to_string(cmd_.engine),
                     running, world_));
    return 1;
  }
  if (cfg_.requeue && checkpoint_signal_sent_) return requeue_after_checkpoint();
  return 0;
}

// The job was stopped as its user asked (Ctrl-C, a signal to gpurun) and ranks ended by it: one
// line that says so, and 128 + the signal, as a shell reports a job its user interrupted.
int Supervisor::user_stop_result() {
  const int sig = forwarded_stop_signal_;
  std::string others;
  for (const auto& o : ended_otherwise_) others += "; " + o;
  tell(fmt::format("stopped {}: {} of {} rank{} ended by it{}",
                   sig == SIGINT
                       ? "as the user asked (SIGINT, Ctrl-C)"
                       : fmt::format("by the {} sent to gpurun", common::signal_name(sig)),
                   ended_by_stop_, world_, world_ == 1 ? "" : "s", others));
  return 128 + sig;
}

int Supervisor::requeue_after_checkpoint() {
  std::vector<std::string> rq = requeue_command(cfg_.alloc);
  if (rq.empty()) {
    say(fmt::format("--requeue: no requeue command for a {} job; the checkpoint stays for a rerun",
                    to_string(cfg_.alloc.scheduler)));
    return 0;
  }
  std::string shown;
  for (const auto& w : rq) shown += (shown.empty() ? "" : " ") + w;
  say(fmt::format("all ranks exited 0 after {} (checkpointed): requeueing {} {} ({})",
                  common::signal_name(checkpoint_signal_sent_),
                  cfg_.alloc.array_task ? "array task" : "job",
                  cfg_.alloc.array_task.value_or(*cfg_.alloc.job_id), shown));
  int rc = 0;
  try {
    rc = proc::exit_code(proc::Child::spawn(rq, cfg_.env).wait());
  } catch (const proc::ExecError& e) {
    rc = e.err == ENOENT ? 127 : 126;
  }
  if (rc != 0) {
    tell(fmt::format("'{}' failed with status {}: the job was not requeued", shown, rc));
    return rc;
  }
  return 0;
}

}  // namespace gpurun::launcher

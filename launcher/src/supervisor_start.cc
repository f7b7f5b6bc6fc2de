// supervisor_start.cc: the Supervisor's first and last steps (supervisor.h): the rendezvous
// port, the control socket, the engine and its host file, the checkpoint deadline; at the end
// gpurun's exit status and --requeue.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>

#include "supervisor.h"
#include "system.h"

namespace gpurun::launcher {

void Supervisor::choose_master_port() {
  RankPlan& plan = cfg_.plan;
  // The rendezvous port must be free where rank 0 will bind it; we can check only our host.
  bool master_here = single_machine_ || plan.master_addr == "127.0.0.1" ||
                     (cfg_.alloc.this_host && *cfg_.alloc.this_host == plan.master_addr) ||
                     plan.master_addr == common::hostname();
  if (!master_here || cfg_.plan_options.master_port) return;
  int p = plan.master_port;
  while (!net::port_free(p) && p < plan.master_port + 200) ++p;
  if (p != plan.master_port)
    say(fmt::format("port {} is busy: MASTER_PORT={}", plan.master_port, p));
  plan.master_port = p;
}

void Supervisor::open_control() {
  control_ = net::listen_tcp(single_machine_, "control socket");
  token_ = proc::random_token();
  std::string host = cfg_.control_addr ? *cfg_.control_addr
                     : single_machine_ ? "127.0.0.1"
                                       : common::hostname();
  cfg_.launch.control = fmt::format("{}:{}:{}", host, control_.port, token_);
}

void Supervisor::start_engine() {
  cfg_.plan.stdout_tty = isatty(STDOUT_FILENO) == 1;
  cfg_.launch.plan_text = encode_plan(cfg_.alloc, cfg_.plan, cfg_.plan_options);
  cmd_ = build_launch(cfg_.alloc, cfg_.plan, cfg_.launch);
  for (const auto& n : cmd_.notes) say(n);

  Env env = cfg_.env;
  for (const auto& [k, v] : cmd_.engine_env) env[k] = v;
  if (!cmd_.slurm_hostfile.empty()) {
    std::string text;
    for (const auto& h : cmd_.slurm_hostfile) text += h + "\n";
    hostfile_ = proc::TempFile::create("gpurun-hosts-", text, "SLURM_HOSTFILE");
    env["SLURM_HOSTFILE"] = hostfile_->path();
  }
  t0_ = proc::now_seconds();
  if (cmd_.engine == Engine::fork) {
    for (int r = 0; r < world_; ++r) {
      Env e = env;
      e["GPURUN_RANK"] = std::to_string(r);
      std::vector<std::string> argv{
          cfg_.launch.self_exe, "_rank", "--plan", cfg_.launch.plan_text, "--control",
          cfg_.launch.control,  "--"};
      argv.insert(argv.end(), cfg_.launch.program.begin(), cfg_.launch.program.end());
      children_.push_back(proc::Child::spawn(argv, e));
    }
  } else {
    children_.push_back(proc::Child::spawn(cmd_.argv, env));
  }
  const RankPlan& plan = cfg_.plan;
  say(fmt::format("{} rank{} on {} node{} via {}", world_, world_ == 1 ? "" : "s",
                  plan.nodes.size(), plan.nodes.size() == 1 ? "" : "s", to_string(cmd_.engine)));
  timers_.set(Timer::start, t0_ + cfg_.start_timeout);
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
  double at = t0_ + std::max(0.0, *left - cfg_.checkpoint_before);
  timers_.set(Timer::checkpoint, at);
  say(fmt::format("{:.0f} s left in the job: {} to all ranks in {:.0f} s", *left,
                  common::signal_name(cfg_.checkpoint_signal), at - t0_));
}

namespace {

std::string describe_wait_status(int st) {
  if (WIFSIGNALED(st))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(st),
                       common::signal_name(WTERMSIG(st)));
  return fmt::format("exited with code {}", WEXITSTATUS(st));
}

// The scheduler's own requeue command for a job, or empty when it has none we know.
std::vector<std::string> requeue_command(const Allocation& a) {
  if (!a.job_id) return {};
  switch (a.scheduler) {
    case Scheduler::slurm:
      return {"scontrol", "requeue", *a.job_id};
    case Scheduler::pbs:
      return {"qrerun", *a.job_id};
    case Scheduler::lsf:
      return {"brequeue", *a.job_id};
    default:
      return {};
  }
}

}  // namespace

int Supervisor::result() {
  if (failure_ && failure_->rank >= 0) {
    say(fmt::format("rank {} on {} {} after {:.1f} s; stopped {} other rank{}", failure_->rank,
                    failure_->host, failure_->what, failure_->seconds, stopped_others_,
                    stopped_others_ == 1 ? "" : "s"));
    return failure_->status;
  }
  if (failure_) return failure_->status;
  // No rank failed. The engine's own status still counts (it may have failed to start ranks).
  for (const auto& c : children_) {
    int st = c.status().value_or(0);
    if (proc::exit_code(st) != 0) {
      say(fmt::format("{} {} ({} of {} ranks started)", to_string(cmd_.engine),
                      describe_wait_status(st), started_, world_));
      return proc::exit_code(st);
    }
  }
  if (started_ < world_) {
    say(fmt::format("{} exited but only {} of {} ranks ever started", to_string(cmd_.engine),
                    started_, world_));
    return 1;
  }
  if (cfg_.requeue && checkpoint_signal_sent_) return requeue_after_checkpoint();
  return 0;
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
  say(fmt::format("all ranks exited 0 after {} (checkpointed): requeueing job {} ({})",
                  common::signal_name(checkpoint_signal_sent_), *cfg_.alloc.job_id, shown));
  int rc = 0;
  try {
    rc = proc::exit_code(proc::Child::spawn(rq, cfg_.env).wait());
  } catch (const proc::ExecError& e) {
    rc = e.err == ENOENT ? 127 : 126;
  }
  if (rc != 0) {
    say(fmt::format("'{}' failed with status {}: the job was not requeued", shown, rc));
    return rc;
  }
  return 0;
}

}  // namespace gpurun::launcher

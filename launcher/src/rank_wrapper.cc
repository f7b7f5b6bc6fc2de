// rank_wrapper.cc: the rank wrapper's setup, event loop and handlers (wrapper.h), and
// exec_in_step for a gpurun that runs inside an srun/jsrun task.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env_util.h"
#include "net.h"
#include "run.h"
#include "system.h"
#include "wrapper.h"

namespace gpurun::launcher {
namespace {

const std::vector<int> kForwarded = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT};
constexpr double kStopGrace = 5.0;
constexpr double kConnectTimeout = 20.0;

}  // namespace

WrapperArgs parse_wrapper_args(const std::vector<std::string>& args) {
  WrapperArgs w;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plan" && i + 1 < args.size()) {
      w.plan_text = args[++i];
    } else if (args[i] == "--control" && i + 1 < args.size()) {
      w.control = args[++i];
    } else if (args[i] == "--") {
      w.program.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    } else {
      throw Error(fmt::format("gpurun _rank: unexpected argument '{}'", args[i]));
    }
  }
  if (w.plan_text.empty() || w.program.empty())
    throw Error(
        "gpurun _rank: usage: gpurun _rank --plan PLAN --control HOST:PORT:TOKEN -- PROGRAM");
  return w;
}

EngineRank engine_rank(const Env& env) {
  struct Src {
    const char* rank;
    const char* local;
  };
  const Src srcs[] = {{"GPURUN_RANK", nullptr},
                      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
                      {"PMIX_RANK", nullptr},
                      {"SLURM_PROCID", "SLURM_LOCALID"},
                      {"JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK"},
                      {"PMI_RANK", nullptr},
                      {"PBS_VNODENUM", nullptr}};
  for (const auto& s : srcs) {
    auto v = detail::get_count(env, s.rank);
    if (!v) continue;
    EngineRank r{static_cast<int>(*v), s.rank, std::nullopt, ""};
    if (s.local)
      if (auto l = detail::get_count(env, s.local)) {
        r.local_rank = static_cast<int>(*l);
        r.local_source = s.local;
      }
    return r;
  }
  throw Error(
      "gpurun _rank: cannot tell this rank's number: none of GPURUN_RANK, OMPI_COMM_WORLD_RANK, "
      "PMIX_RANK, SLURM_PROCID, JSM_NAMESPACE_RANK, PMI_RANK, PBS_VNODENUM is set (run gpurun, "
      "not gpurun _rank)");
}

RankWrapper::RankWrapper(WrapperArgs args, Env env)
    : args_(std::move(args)), env_(std::move(env)), plan_(decode_plan(args_.plan_text)) {}

// Which rank this is, checked against the plan; its environment and GPUs.
void RankWrapper::locate() {
  EngineRank er = engine_rank(env_);
  if (er.rank < 0 || er.rank >= plan_.plan.world_size)
    throw Error(
        fmt::format("{}={} but the plan has {} ranks", er.source, er.rank, plan_.plan.world_size));
  me_ = plan_.plan.ranks[static_cast<std::size_t>(er.rank)];
  if (er.local_rank && *er.local_rank != me_.local_rank)
    throw Error(fmt::format(
        "rank {}: the engine placed it as {}={} but gpurun planned local rank {} on {}: the "
        "engine did not follow the plan (a --launcher-args mapping option?)",
        me_.rank, er.local_source, *er.local_rank, me_.local_rank, me_.host));

  std::optional<std::vector<std::string>> visible;
  if (env_.count("CUDA_VISIBLE_DEVICES")) {
    visible = parse_gpu_list(env_["CUDA_VISIBLE_DEVICES"]);
  } else {
    visible.emplace();
    if (!me_.gpus.empty())
      for (int i = 0, n = sys::cuda_device_count(); i < n; ++i)
        visible->push_back(std::to_string(i));
  }
  for (auto& [k, v] : rank_environment(plan_.plan, me_, plan_.scheduler, plan_.job_id, visible))
    env_[k] = v;
  env_.erase("GPURUN_RANK");
}

void RankWrapper::connect() {
  if (args_.control == "none") return;
  // host:port:token; host may be an IPv6 literal, so split from the right.
  const std::string& c = args_.control;
  auto c2 = c.rfind(':');
  auto c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : c.rfind(':', c2 - 1);
  if (c1 == std::string::npos)
    throw Error(fmt::format("gpurun _rank --control '{}': expected host:port:token", c));
  token_ = c.substr(c2 + 1);
  control_ = net::connect_tcp(c.substr(0, c1), c.substr(c1 + 1, c2 - c1 - 1), kConnectTimeout,
                              fmt::format("rank {} on {}", me_.rank, me_.host));
  report(control::Hello{token_, me_.rank, me_.host, getpid()});
}

void RankWrapper::start_program() {
  auto sigs = kForwarded;
  sigs.push_back(SIGCHLD);
  signals_.emplace(sigs);
  started_ = proc::now_seconds();
  pid_t parent = getpid();
  try {
    child_ = proc::Child::spawn(args_.program, env_, [parent] {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(137);  // the wrapper died before prctl took effect
    });
  } catch (const proc::ExecError& e) {
    fmt::print(stderr, "gpurun: {}\n", e.what());
    exec_failure_ = e.err == ENOENT ? 127 : 126;  // what a shell would say
  }
}

int RankWrapper::run() {
  locate();
  connect();
  start_program();
  while (child_.running()) {
    pollfd fds[2] = {{signals_->fd(), POLLIN, 0}, {control_.get(), POLLIN, 0}};
    poll(fds, control_ ? 2 : 1, timers_.wait_ms(proc::now_seconds(), 60000));
    for (Timer t : timers_.take_due(proc::now_seconds())) on_timer(t);
    if (fds[0].revents & POLLIN)
      for (int s : signals_->drain()) on_signal(s);
    if (control_ && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) on_control_readable();
  }
  return finish();
}

void RankWrapper::on_signal(int sig) {
  if (sig == SIGCHLD)
    child_.poll_exit();
  else
    child_.signal(sig);
}

void RankWrapper::on_control_readable() {
  std::vector<std::string> lines;
  auto state = control_in_.read_from(control_.get(), lines);
  for (const auto& line : lines)
    if (auto m = control::parse_to_wrapper(line))
      std::visit([&](const auto& msg) { on_message(msg); }, *m);
  if (state != proc::LineReader::State::open) on_control_closed();
}

void RankWrapper::on_message(const control::Stop&) {
  stop_program();
}

void RankWrapper::on_message(const control::Signal& m) {
  child_.signal(m.signal);
}

// gpurun is gone: nobody supervises this rank any more.
void RankWrapper::on_control_closed() {
  control_.reset();
  stop_program();
}

void RankWrapper::on_timer(Timer t) {
  if (t == Timer::kill) child_.signal_group(SIGKILL);
}

void RankWrapper::stop_program() {
  child_.signal_group(SIGTERM);
  if (!timers_.armed(Timer::kill)) timers_.set(Timer::kill, proc::now_seconds() + kStopGrace);
}

void RankWrapper::report(const control::ToSupervisor& m) {
  if (control_) common::write_all(control_.get(), control::encode(m));
}

int RankWrapper::finish() {
  double secs = proc::now_seconds() - started_;
  int status = child_.status().value_or(0);
  // What the program left behind in its group goes with it.
  if (child_.pid() > 0) ::killpg(child_.pid(), SIGKILL);
  int code = exec_failure_ ? *exec_failure_ : WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  if (control_) {
    report(control::Exit{me_.rank, code, sig, secs});
    shutdown(control_.get(), SHUT_WR);
    // Wait briefly for gpurun to read it, so the EXIT is not lost to a reset.
    pollfd p{control_.get(), POLLIN, 0};
    poll(&p, 1, 1000);
    control_.reset();
  }
  signals_.reset();
  if (sig) {
    signal(sig, SIG_DFL);
    kill(getpid(), sig);
    return 128 + sig;
  }
  return code;
}

int run_rank_wrapper(const std::vector<std::string>& args) {
  return RankWrapper(parse_wrapper_args(args), sys::process_env()).run();
}

int exec_in_step(const Allocation& a, const RankPlan& plan, const Env& env_in,
                 const std::vector<std::string>& program) {
  const StepTask& t = *a.step_task;
  Env env = env_in;
  // The step's own numbers are the truth (srun may distribute cyclically); the plan supplies
  // this slot's GPU positions.
  RankEntry me;
  for (const auto& r : plan.ranks)
    if (r.node_rank == t.node_rank && r.local_rank == t.local_rank) me = r;
  me.rank = t.rank;
  std::optional<std::vector<std::string>> visible = a.local_gpu_ids;
  // Slurm/jsrun may already have bound this task to its own GPUs (--gpus-per-task,
  // --gpu-bind): then the task's whole visible list is its share.
  int node_gpus = plan.nodes.at(static_cast<std::size_t>(t.node_rank)).gpus;
  if (!a.local_gpu_ids.empty() && static_cast<int>(a.local_gpu_ids.size()) < node_gpus) {
    me.gpus.clear();
    for (std::size_t i = 0; i < a.local_gpu_ids.size(); ++i) me.gpus.push_back(static_cast<int>(i));
  }
  RankPlan p = plan;
  p.stdout_tty = isatty(STDOUT_FILENO) == 1;
  for (auto& [k, v] : rank_environment(p, me, a.scheduler, a.job_id, visible)) env[k] = v;
  int err = proc::exec_program(program, env);
  throw proc::ExecError(program.empty() ? "" : program[0], err);
}

}  // namespace gpurun::launcher

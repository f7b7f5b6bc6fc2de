// rank_wrapper.cc: the rank wrapper's setup, event loop and ending (wrapper.h), and exec_in_step
// for a gpurun that runs inside an srun/jsrun task.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "alloc/env_util.h"
#include "cli/run.h"
#include "gpurun/common/terminal.h"
#include "gpurun/gpuinfo/proc_usage.h"
#include "sys/net.h"
#include "sys/system.h"
#include "wrapper/relay.h"
#include "wrapper/wrapper.h"

namespace gpurun::launcher {
namespace {

constexpr double kConnectTimeout = 20.0;
constexpr double kByeWait = 5.0;      // for gpurun to acknowledge the EXIT
constexpr double kOutputDrain = 1.0;  // for what the program's group still writes after it ended
constexpr int kSetupErrorStatus = 2;  // a rank that setup() could not place: main()'s for an Error

}  // namespace

WrapperArgs parse_wrapper_args(const std::vector<std::string>& args) {
  WrapperArgs w;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plan" && i + 1 < args.size()) {
      w.plan_text = args[++i];
    } else if (args[i] == "--control" && i + 1 < args.size()) {
      w.control = args[++i];
    } else if (args[i] == "--path" && i + 1 < args.size()) {
      w.path = args[++i];
    } else if (args[i] == "--ld-library-path" && i + 1 < args.size()) {
      w.ld_library_path = args[++i];
    } else if (args[i] == "--container-runtime" && i + 1 < args.size()) {
      const std::string& r = args[++i];
      if (r != "apptainer" && r != "podman")
        throw Error(
            fmt::format("gpurun _rank --container-runtime '{}': expected apptainer or podman", r));
      if (!w.container) w.container.emplace();
      w.container->runtime = r == "podman" ? ContainerRuntime::podman : ContainerRuntime::apptainer;
    } else if (args[i] == "--container" && i + 1 < args.size()) {
      if (!w.container) w.container.emplace();
      w.container->image = args[++i];
    } else if (args[i] == "--") {
      w.program.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    } else {
      throw Error(fmt::format("gpurun _rank: unexpected argument '{}'", args[i]));
    }
  }
  if (w.plan_text.empty() || w.program.empty() || (w.container && w.container->image.empty()))
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
    : args_(std::move(args)), env_(std::move(env)), plan_(decode_rank_table(args_.plan_text)) {}

// Which rank this is: what the engine says, in the plan's range. Nothing else can be checked
// before connect(): HELLO needs the rank.
void RankWrapper::identify() {
  engine_ = engine_rank(env_);
  if (engine_.rank < 0 || engine_.rank >= plan_.plan.world_size)
    throw Error(fmt::format("{}={} but the plan has {} ranks", engine_.source, engine_.rank,
                            plan_.plan.world_size));
  me_ = plan_.plan.ranks[static_cast<std::size_t>(engine_.rank)];
}

// This rank checked against the plan, its GPUs and environment. Run once connected, so that
// what fails here reaches gpurun as this rank's failure (setup()).
void RankWrapper::locate() {
  if (engine_.local_rank && *engine_.local_rank != me_.local_rank)
    throw Error(fmt::format(
        "rank {}: the engine placed it as {}={} but gpurun planned local rank {} on {}: the "
        "engine did not follow the plan (a --launcher-args mapping option?)",
        me_.rank, engine_.local_source, *engine_.local_rank, me_.local_rank, me_.host));

  const PlanNode& node = plan_.plan.nodes.at(static_cast<std::size_t>(me_.node_rank));
  if (env_.count("CUDA_VISIBLE_DEVICES")) {
    visible_ = parse_gpu_list(env_["CUDA_VISIBLE_DEVICES"]);
  } else if (!node.gpu_ids.empty()) {  // the scheduler named this node's GPUs (PBS_GPUFILE)
    visible_ = node.gpu_ids;
  } else if (!me_.gpus.empty()) {
    for (int i = 0, n = sys::gpu_count(env_); i < n; ++i) visible_.push_back(std::to_string(i));
  }
  // srun bound this task to its own GPUs (the job's --gpus-per-task or --gpu-bind reach gpurun's
  // step): they are this rank's, whatever positions in the node's list the plan gave it.
  if (srun_bound_task_gpus(env_, visible_.size(), node.gpus))
    me_.gpus = task_gpu_share(visible_.size());
  for (auto& [k, v] : rank_environment(plan_.plan, me_, plan_.scheduler, plan_.job_id, visible_)) {
    env_[k] = v;
    rank_keys_.push_back(k);
  }
  env_.erase("GPURUN_RANK");
  // The user's PATH and LD_LIBRARY_PATH, as gpurun had them, not as the engine left them.
  if (args_.path) env_["PATH"] = *args_.path;
  if (args_.ld_library_path && args_.ld_library_path->empty()) env_.erase("LD_LIBRARY_PATH");
  if (args_.ld_library_path && !args_.ld_library_path->empty())
    env_["LD_LIBRARY_PATH"] = *args_.ld_library_path;
  master_port_ = plan_.plan.master_port;
}

// locate() once connected: an error there ends this rank as a program that could not start
// would, reported to gpurun with its message and main()'s status for an error (2), so gpurun
// names this rank, not one the engine killed after it.
void RankWrapper::setup() {
  try {
    locate();
  } catch (const Error& e) {
    exec_failure_ = control::Exit{kSetupErrorStatus, 0, 0,
                                  control::Text{std::string("cannot start: ") + e.what()}};
  }
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
  const std::string host = c.substr(0, c1), port = c.substr(c1 + 1, c2 - c1 - 1);
  if (!join_relay(host, port))
    control_ = net::connect_tcp(host, port, kConnectTimeout,
                                fmt::format("rank {} on {}", me_.rank, me_.host));
  report(control::Hello{token_, me_.rank, me_.host, getpid()});
}

// A node of several ranks talks to gpurun through its relay (relay.h), one connection a node;
// false where that cannot be (one rank here, no Unix sockets, GPURUN_CONTROL_RELAY=0).
bool RankWrapper::join_relay(const std::string& host, const std::string& port) {
  int local = 0;
  for (const auto& r : plan_.plan.ranks) local += r.node_rank == me_.node_rank ? 1 : 0;
  auto off = env_.find("GPURUN_CONTROL_RELAY");
  if (local < 2 || (off != env_.end() && off->second == "0")) return false;
  auto joined = relay::join(relay::Target{host, port, token_, me_.host, local}, kConnectTimeout);
  if (!joined) return false;
  control_ = std::move(joined->fd);
  relay_ = joined->forked;
  relayed_ = true;
  return true;
}

int RankWrapper::run() {
  // Orphans of the program's processes come to the wrapper (not to init), so end_orphans() finds
  // them; set before anything is started.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  identify();
  signals_.emplace(std::vector<int>{SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGCHLD});
  connect();
  setup();
  // Without gpurun there is nobody to wait for: start at once (unless setup() failed).
  if (!control_ && !exec_failure_) start_program(control::Go{});
  while (!finished()) wait_and_dispatch();
  return finish();
}

// The program ended (or never could start), or a stop came before it started.
bool RankWrapper::finished() const {
  if (abort_signal_ || exec_failure_) return true;
  return started_program_ && !child_.running();
}

void RankWrapper::wait_and_dispatch() {
  enum { kSig, kCtl, kProbe, kOut, kErr, kMon };
  pollfd fds[6] = {{signals_->fd(), POLLIN, 0},    {control_.get(), POLLIN, 0},
                   {port_.probe.get(), POLLIN, 0}, {out_[0].get(), POLLIN, 0},
                   {out_[1].get(), POLLIN, 0},     {monitor_ ? monitor_->fd() : -1, POLLIN, 0}};
  poll(fds, 6, timers_.wait_ms(proc::now_seconds(), 60000));  // fd -1 entries are skipped
  for (Timer t : timers_.take_due(proc::now_seconds())) on_timer(t);
  if (fds[kSig].revents & POLLIN)
    for (int s : signals_->drain()) on_signal(s);
  if (fds[kOut].revents & (POLLIN | POLLHUP)) on_output(1);
  if (fds[kErr].revents & (POLLIN | POLLHUP)) on_output(2);
  if (fds[kProbe].revents & POLLIN) on_probe();
  if (fds[kMon].revents & POLLIN) report_monitor();
  if (control_ && (fds[kCtl].revents & (POLLIN | POLLHUP | POLLERR))) on_control_readable();
}

// What the program (and what it left running in its group) still wrote, up to `deadline`.
void RankWrapper::drain_output(double deadline) {
  while ((out_[0] || out_[1]) && proc::now_seconds() < deadline) {
    pollfd fds[2] = {{out_[0].get(), POLLIN, 0}, {out_[1].get(), POLLIN, 0}};
    int ms = static_cast<int>((deadline - proc::now_seconds()) * 1000);
    if (poll(fds, 2, std::max(ms, 1)) <= 0) break;
    for (int i = 0; i < 2; ++i)
      if (fds[i].revents & (POLLIN | POLLHUP)) on_output(i + 1);
  }
  for (int i = 0; i < 2; ++i)
    if (auto p = fwd_[static_cast<std::size_t>(i)].take_partial_now()) forward(i + 1, Line::kPartial, *p);
}

// Waits for gpurun's BYE (the answer to EXIT); false if it did not come by `deadline`.
bool RankWrapper::await_bye(double deadline) {
  while (control_ && !bye_ && proc::now_seconds() < deadline) {
    pollfd p{control_.get(), POLLIN, 0};
    int ms = static_cast<int>((deadline - proc::now_seconds()) * 1000);
    if (poll(&p, 1, std::max(ms, 1)) <= 0) break;
    on_control_readable();
  }
  return bye_;
}

// What the program left running in its group is killed, as Slurm ends a finished task's
// leftovers. But once the program was signalled (a forwarded signal, gpurun's STOP to the whole
// group), what is left may be acting on it (a script's python saving its checkpoint on the TERM
// that ended the shell): it gets until the kill grace from that signal, its output read meanwhile.
void RankWrapper::end_leftovers() {
  const pid_t group = child_.pid();
  const double deadline = signalled_at_ ? *signalled_at_ + plan_.wrapper.kill_grace : 0;
  while (::killpg(group, 0) == 0 && proc::now_seconds() < deadline) {
    if (out_[0] || out_[1])
      drain_output(std::min(deadline, proc::now_seconds() + 0.05));
    else
      poll(nullptr, 0, 20);
  }
  ::killpg(group, SIGKILL);
}

// What the program left outside its group (`setsid cmd &`, daemons): the subreaper wrapper is
// their parent once theirs ended. Each is killed and reaped, and whatever it had started comes to
// the wrapper in turn; bounded at 2 s. A child's pid cannot be reused before the wrapper reaps
// it, so the kill by pid hits no bystander.
void RankWrapper::end_orphans() {
  const double deadline = proc::now_seconds() + 2;
  const int self = static_cast<int>(getpid());
  while (proc::now_seconds() < deadline) {
    int st = 0;
    while (waitpid(-1, &st, WNOHANG) > 0) {
    }
    bool any = false;
    for (const auto& p : gpuinfo::scan_processes())
      if (p.ppid == self && p.pid != relay_) any = kill(p.pid, SIGKILL) == 0 || any;
    if (!any) return;
    poll(nullptr, 0, 10);
  }
}

int RankWrapper::finish() {
  double secs = started_program_ ? proc::now_seconds() - started_ : 0;
  int status = child_.status().value_or(0);
  if (monitor_) {  // the sample under way, and what waits, go before the EXIT
    monitor_->stop();
    report_monitor();
    monitor_.reset();
  }
  if (started_program_) {
    // Read what is there, then end what the program left behind in its group and outside it
    // (which may hold its output pipes open), then read the rest.
    drain_output(proc::now_seconds() + 0.05);
    end_leftovers();
    end_orphans();
    drain_output(proc::now_seconds() + kOutputDrain);
  }
  control::Exit e = exec_failure_ ? *exec_failure_ : control::Exit{};
  if (started_program_) {
    e.code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    e.seconds = secs;
  } else if (abort_signal_) {
    e.signal = abort_signal_;
    e.what.value = "was stopped before its program started";
  }
  report(e);
  exit_sent_ = true;
  const bool acknowledged = await_bye(proc::now_seconds() + kByeWait);
  // The node's other ranks may still talk through the relay this wrapper forked: it ends once
  // they all closed (this one too), and must not end with this process.
  control_.reset();
  relay::wait_for(relay_);
  // gpurun has the status: end quietly, so the engine adds no banner of its own.
  if (acknowledged) return 0;
  if (exec_failure_)
    fmt::print(stderr, "gpurun: rank {} on {} {}\n", me_.rank, common::escape_control(me_.host),
               common::escape_control(e.what.value));
  control_.reset();
  signals_.reset();
  dir_.reset();  // before a signal to ourselves ends the process without destructors
  if (e.signal) {
    signal(e.signal, SIG_DFL);
    kill(getpid(), e.signal);
    return 128 + e.signal;
  }
  return e.code;
}

int run_rank_wrapper(const std::vector<std::string>& args) {
  return RankWrapper(parse_wrapper_args(args), sys::process_env()).run();
}

int exec_in_step(const Allocation& a, const RankPlan& plan, const Env& env_in,
                 const std::vector<std::string>& program,
                 const std::optional<ContainerSpec>& container) {
  Env env = env_in;
  RankEntry me = step_task_entry(a, plan);
  std::optional<std::vector<std::string>> visible = a.local_gpu_ids;
  RankPlan p = plan;
  p.stdout_tty = isatty(STDOUT_FILENO) == 1;
  ContainerRank inside;
  auto vars = rank_environment(p, me, a.scheduler, a.job_id, visible);
  for (auto& kv : start_environment(env, StartValues{})) vars.push_back(kv);
  for (auto& [k, v] : vars) {
    env[k] = v;
    inside.env.emplace_back(k, v);
  }
  std::vector<std::string> argv = program;
  if (container && container->runtime != ContainerRuntime::pyxis) {
    for (const auto& [k, v] : env)
      if (passed_into_container(k) && k.rfind("GPURUN_", 0) != 0) inside.env.emplace_back(k, v);
    inside.workdir = sys::current_dir();
    argv = container_argv(*container, inside, program);
  }
  int err = proc::exec_program(argv, env);
  throw proc::ExecError(argv.empty() ? "" : argv[0], err);
}

}  // namespace gpurun::launcher

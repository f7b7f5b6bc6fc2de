// rank_wrapper.cc: `gpurun _rank`, run by the engine once per rank.
//
// It learns its global rank from the engine (OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID,
// JSM_NAMESPACE_RANK, PMI_RANK, PBS_VNODENUM, or GPURUN_RANK from gpurun's own fork), checks the
// engine placed it where the plan says, gives it its GPUs from this node's visible list, starts
// the program in its own process group, and reports to gpurun: HELLO at start, EXIT at the end.
// Commands from gpurun: "SIG n" (forward a signal) and "STOP" (TERM, then KILL after a grace).
// If gpurun goes away, the program is stopped too: no orphan keeps a GPU.
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "env_util.h"
#include "gpurun/common/posix.h"
#include "gpurun/launcher/error.h"
#include "proc_util.h"
#include "run.h"
#include "system.h"

namespace gpurun::launcher {
namespace {

const std::vector<int> kForwarded = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT};
constexpr double kStopGrace = 5.0;

struct EngineRank {
  int rank;
  std::string source;
  std::optional<int> local_rank;
  std::string local_source;
};

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

int connect_control(const std::string& control, int rank, const std::string& host,
                    std::string& token) {
  // host:port:token; host may be an IPv6 literal, so split from the right.
  auto c2 = control.rfind(':');
  auto c1 = c2 == std::string::npos ? std::string::npos : control.rfind(':', c2 - 1);
  if (c1 == std::string::npos)
    throw Error(fmt::format("gpurun _rank --control '{}': expected host:port:token", control));
  std::string h = control.substr(0, c1), port = control.substr(c1 + 1, c2 - c1 - 1);
  token = control.substr(c2 + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(h.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    throw Error(
        fmt::format("rank {} on {}: cannot resolve gpurun's host '{}': {} (is it in "
                    "/etc/hosts on this node? gpurun --control-addr sets another name)",
                    rank, host, h, gai_strerror(rc)));
  int fd = -1;
  std::string why;
  double deadline = proc::now_seconds() + 20;
  while (fd < 0 && proc::now_seconds() < deadline) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (s < 0) continue;
      if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
        fd = s;
        break;
      }
      why = strerror(errno);
      close(s);
    }
    if (fd < 0) usleep(200000);
  }
  freeaddrinfo(res);
  if (fd < 0)
    throw Error(
        fmt::format("rank {} on {}: cannot reach gpurun at {}:{}: {} (a firewall between "
                    "nodes? gpurun --control-addr sets the address ranks use)",
                    rank, host, h, port, why));
  return fd;
}

}  // namespace

int run_rank_wrapper(const std::vector<std::string>& args) {
  std::string plan_text, control = "none";
  std::vector<std::string> program;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plan" && i + 1 < args.size()) {
      plan_text = args[++i];
    } else if (args[i] == "--control" && i + 1 < args.size()) {
      control = args[++i];
    } else if (args[i] == "--") {
      program.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    } else {
      throw Error(fmt::format("gpurun _rank: unexpected argument '{}'", args[i]));
    }
  }
  if (plan_text.empty() || program.empty())
    throw Error(
        "gpurun _rank: usage: gpurun _rank --plan PLAN --control HOST:PORT:TOKEN -- PROGRAM");

  DecodedPlan d = decode_plan(plan_text);
  Env env = sys::process_env();
  EngineRank er = engine_rank(env);
  if (er.rank < 0 || er.rank >= d.plan.world_size)
    throw Error(
        fmt::format("{}={} but the plan has {} ranks", er.source, er.rank, d.plan.world_size));
  const RankEntry& me = d.plan.ranks[static_cast<std::size_t>(er.rank)];
  if (er.local_rank && *er.local_rank != me.local_rank)
    throw Error(fmt::format(
        "rank {}: the engine placed it as {}={} but gpurun planned local rank {} on {}: the "
        "engine did not follow the plan (a --launcher-args mapping option?)",
        me.rank, er.local_source, *er.local_rank, me.local_rank, me.host));

  std::optional<std::vector<std::string>> visible;
  if (env.count("CUDA_VISIBLE_DEVICES")) {
    visible = parse_gpu_list(env["CUDA_VISIBLE_DEVICES"]);
  } else {
    visible.emplace();
    if (!me.gpus.empty())
      for (int i = 0, n = sys::cuda_device_count(); i < n; ++i)
        visible->push_back(std::to_string(i));
  }
  for (auto& [k, v] : rank_environment(d.plan, me, d.scheduler, d.job_id, visible)) env[k] = v;
  env.erase("GPURUN_RANK");

  int ctl = -1;
  std::string token;
  if (control != "none") {
    ctl = connect_control(control, me.rank, me.host, token);
    common::write_all(ctl, fmt::format("HELLO {} {} {} {}\n", token, me.rank, me.host, getpid()));
  }

  int sigfd = proc::install_signal_pipe([] {
    auto v = kForwarded;
    v.push_back(SIGCHLD);
    return v;
  }());
  double started = proc::now_seconds();
  pid_t parent = getpid();
  pid_t child = fork();
  if (child < 0) throw Error(fmt::format("rank {}: fork failed: {}", me.rank, strerror(errno)));
  if (child == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);  // the wrapper died before prctl took effect
    proc::restore_default_signals(kForwarded);
    proc::restore_default_signals({SIGCHLD});
    proc::exec_program(program, env);
  }
  setpgid(child, child);

  int status = 0;
  bool done = false;
  double kill_at = 0;
  std::string buf;
  while (!done) {
    pollfd fds[2] = {{sigfd, POLLIN, 0}, {ctl, POLLIN, 0}};
    int timeout =
        kill_at > 0 ? std::max(0, static_cast<int>((kill_at - proc::now_seconds()) * 1000)) : -1;
    poll(fds, ctl >= 0 ? 2 : 1, timeout);
    if (kill_at > 0 && proc::now_seconds() >= kill_at) {
      killpg(child, SIGKILL);
      kill_at = 0;
    }
    if (fds[0].revents & POLLIN) {
      for (int s : proc::drain_signals(sigfd)) {
        if (s == SIGCHLD) {
          pid_t w = waitpid(child, &status, WNOHANG);
          if (w == child) done = true;
        } else {
          kill(child, s);
        }
      }
    }
    if (ctl >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      std::vector<std::string> lines;
      bool open = proc::read_lines(ctl, buf, lines);
      for (const auto& l : lines) {
        if (l.rfind("SIG ", 0) == 0) {
          kill(child, std::atoi(l.c_str() + 4));
        } else if (l == "STOP") {
          killpg(child, SIGTERM);
          kill_at = proc::now_seconds() + kStopGrace;
        }
      }
      if (!open) {  // gpurun is gone: nobody supervises this rank any more
        close(ctl);
        ctl = -1;
        killpg(child, SIGTERM);
        kill_at = proc::now_seconds() + kStopGrace;
      }
    }
  }
  double secs = proc::now_seconds() - started;
  killpg(child, SIGKILL);  // what the program left behind in its group goes with it
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  if (ctl >= 0) {
    common::write_all(ctl, fmt::format("EXIT {} {} {} {:.3f}\n", me.rank, code, sig, secs));
    shutdown(ctl, SHUT_WR);
    // Wait briefly for gpurun to read it, so the EXIT is not lost to a reset.
    pollfd p{ctl, POLLIN, 0};
    poll(&p, 1, 1000);
    close(ctl);
  }
  if (sig) {
    proc::restore_default_signals({sig});
    signal(sig, SIG_DFL);
    kill(getpid(), sig);
    return 128 + sig;
  }
  return code;
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
  proc::exec_program(program, env);
}

}  // namespace gpurun::launcher

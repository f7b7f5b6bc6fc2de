// supervisor.cc: gpurun's side of a launch (see run.h).
//
// Fail-fast: the first rank that exits non-zero, is killed, or whose wrapper vanishes ends the
// job: every other wrapper gets STOP (TERM, KILL after 5 s) and the engine gets TERM, then KILL
// after --kill-grace; gpurun then prints one line naming that rank and exits with its status.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <sstream>

#include "env_util.h"
#include "gpurun/common/posix.h"
#include "gpurun/launcher/error.h"
#include "proc_util.h"
#include "run.h"
#include "system.h"

namespace gpurun::launcher {

int parse_signal(const std::string& text, const std::string& what) {
  if (auto sig = common::parse_signal(text)) return *sig;
  throw Error(fmt::format("{} '{}': expected a signal such as USR1, SIGTERM or 10", what, text));
}

namespace {

struct Conn {
  int fd = -1;
  std::string buf;
  int rank = -1;  // -1 until its HELLO arrives
};

struct RankState {
  bool started = false, exited = false;
  std::string host;
};

struct Failure {
  int rank;
  std::string host, what;
  int status;
  double seconds;
};

bool port_free(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(s);
  return ok;
}

int listen_socket(bool loopback, int& port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) throw Error(fmt::format("control socket: {}", strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
  a.sin_port = 0;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 4096) != 0)
    throw Error(fmt::format("control socket: {}", strerror(errno)));
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return s;
}

pid_t spawn(const std::vector<std::string>& argv, const Env& env) {
  pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("fork: {}", strerror(errno)));
  if (pid == 0) {
    // Own process group: a terminal's Ctrl-C reaches gpurun alone, which forwards it once.
    setpgid(0, 0);
    proc::restore_default_signals({SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGCHLD});
    proc::exec_program(argv, env);
  }
  setpgid(pid, pid);
  return pid;
}

std::string describe_status(int code, int sig) {
  if (sig) return fmt::format("was killed by signal {} ({})", sig, common::signal_name(sig));
  return fmt::format("exited with code {}", code);
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

// Runs a command and waits for it; returns its exit status.
int run_and_wait(const std::vector<std::string>& argv, const Env& env) {
  pid_t pid = spawn(argv, env);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace

int run_supervisor(RunConfig& cfg) {
  RankPlan& plan = cfg.plan;
  const int world = plan.world_size;
  const bool single_machine =
      cfg.alloc.scheduler == Scheduler::local || cfg.alloc.scheduler == Scheduler::gpuq;
  auto say = [&](const std::string& msg) {
    if (!cfg.quiet) fmt::print(stderr, "gpurun: {}\n", msg);
  };

  // The rendezvous port must be free where rank 0 will bind it; we can check only our host.
  bool master_here = single_machine || plan.master_addr == "127.0.0.1" ||
                     (cfg.alloc.this_host && *cfg.alloc.this_host == plan.master_addr) ||
                     plan.master_addr == common::hostname();
  if (master_here && !cfg.plan_options.master_port) {
    int p = plan.master_port;
    while (!port_free(p) && p < plan.master_port + 200) ++p;
    if (p != plan.master_port)
      say(fmt::format("port {} is busy: MASTER_PORT={}", plan.master_port, p));
    plan.master_port = p;
  }

  int ctl_port = 0;
  int lfd = listen_socket(single_machine, ctl_port);
  std::string token = proc::random_token();
  std::string ctl_host = cfg.control_addr ? *cfg.control_addr
                         : single_machine ? "127.0.0.1"
                                          : common::hostname();
  cfg.launch.control = fmt::format("{}:{}:{}", ctl_host, ctl_port, token);
  plan.stdout_tty = isatty(STDOUT_FILENO) == 1;
  cfg.launch.plan_text = encode_plan(cfg.alloc, plan, cfg.plan_options);
  LaunchCommand cmd = build_launch(cfg.alloc, plan, cfg.launch);
  for (const auto& n : cmd.notes) say(n);

  const std::vector<int> sigs = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGCHLD};
  int sigfd = proc::install_signal_pipe(sigs);

  Env engine_env = cfg.env;
  for (const auto& [k, v] : cmd.engine_env) engine_env[k] = v;
  std::string hostfile;
  if (!cmd.slurm_hostfile.empty()) {
    char tmpl[] = "/tmp/gpurun-hosts-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) throw Error(fmt::format("cannot write SLURM_HOSTFILE: {}", strerror(errno)));
    std::string text;
    for (const auto& h : cmd.slurm_hostfile) text += h + "\n";
    (void)!write(fd, text.data(), text.size());
    close(fd);
    hostfile = tmpl;
    engine_env["SLURM_HOSTFILE"] = hostfile;
  }

  std::vector<pid_t> children;
  double t0 = proc::now_seconds();
  if (cmd.engine == Engine::fork) {
    for (int r = 0; r < world; ++r) {
      Env e = engine_env;
      e["GPURUN_RANK"] = std::to_string(r);
      std::vector<std::string> argv{
          cfg.launch.self_exe, "_rank", "--plan", cfg.launch.plan_text, "--control",
          cfg.launch.control,  "--"};
      argv.insert(argv.end(), cfg.launch.program.begin(), cfg.launch.program.end());
      children.push_back(spawn(argv, e));
    }
  } else {
    children.push_back(spawn(cmd.argv, engine_env));
  }
  say(fmt::format("{} rank{} on {} node{} via {}", world, world == 1 ? "" : "s", plan.nodes.size(),
                  plan.nodes.size() == 1 ? "" : "s", to_string(cmd.engine)));

  std::vector<Conn> conns;
  std::vector<RankState> ranks(static_cast<std::size_t>(world));
  std::map<pid_t, int> engine_status;
  std::optional<Failure> failure;
  int started = 0, exited = 0, stopped_others = 0;
  double term_at = 0, kill_at = 0, stop_deadline = 0, drain_until = 0;
  bool stopping = false, ckpt_sent = false;
  int forwarded_stop_signal = 0;
  int checkpoint_signal_sent = 0;  // USR1/USR2 forwarded, or the --checkpoint-before signal

  double ckpt_at = 0;
  if (cfg.checkpoint_before > 0) {
    std::optional<double> left = cfg.time_left;
    std::optional<std::int64_t> end = cfg.alloc.end_time;
    if (!left && !end && cfg.alloc.scheduler == Scheduler::slurm && cfg.alloc.job_id)
      end = sys::slurm_end_time(cfg.env, *cfg.alloc.job_id);  // Slurm 22.05 exports no end time
    if (!left && end) left = static_cast<double>(*end) - static_cast<double>(std::time(nullptr));
    if (left) {
      ckpt_at = t0 + std::max(0.0, *left - cfg.checkpoint_before);
      say(fmt::format("{:.0f} s left in the job: {} to all ranks in {:.0f} s", *left,
                      common::signal_name(cfg.checkpoint_signal), ckpt_at - t0));
    } else {
      say("--checkpoint-before given but the job's end time is unknown (no SLURM_JOB_END_TIME, "
          "no EndTime from scontrol; use --time-left)");
    }
  }

  auto broadcast = [&](const std::string& line) {
    for (auto& c : conns)
      if (c.fd >= 0 && c.rank >= 0) common::write_all(c.fd, line);
  };
  auto begin_stop = [&](const std::string& why) {
    if (stopping) return;
    stopping = true;
    for (int r = 0; r < world; ++r)
      if (ranks[static_cast<std::size_t>(r)].started &&
          !ranks[static_cast<std::size_t>(r)].exited && (!failure || failure->rank != r))
        ++stopped_others;
    broadcast("STOP\n");
    // The wrappers end their programs; the engine then sees its tasks gone and reaps them.
    // Only an engine that lingers gets TERM (after 2 s) and KILL (after --kill-grace more).
    term_at = proc::now_seconds() + 2;
    kill_at = term_at + cfg.kill_grace;
    if (!why.empty()) say(why);
  };
  auto record_failure = [&](int rank, const std::string& what, int status, double secs) {
    if (failure) return;
    failure = Failure{rank, ranks[static_cast<std::size_t>(rank)].host, what, status, secs};
    begin_stop("");
  };

  while (true) {
    bool engine_done = engine_status.size() == children.size();
    bool conns_open = false;
    for (auto& c : conns) conns_open = conns_open || c.fd >= 0;
    if (engine_done) {
      if (!conns_open) break;
      if (drain_until == 0) drain_until = proc::now_seconds() + 2;
      if (proc::now_seconds() > drain_until) break;
    }
    std::vector<pollfd> fds{{sigfd, POLLIN, 0}, {lfd, POLLIN, 0}};
    for (auto& c : conns) fds.push_back({c.fd, POLLIN, 0});
    double now = proc::now_seconds();
    double next = now + 1.0;
    for (double t : {term_at, kill_at, stop_deadline, ckpt_at, drain_until})
      if (t > 0) next = std::min(next, t);
    poll(fds.data(), fds.size(), std::max(0, static_cast<int>((next - now) * 1000) + 1));
    now = proc::now_seconds();

    if (fds[0].revents & POLLIN) {
      for (int s : proc::drain_signals(sigfd)) {
        if (s == SIGCHLD) {
          int st;
          pid_t p;
          while ((p = waitpid(-1, &st, WNOHANG)) > 0) engine_status[p] = st;
        } else if ((s == SIGINT || s == SIGTERM) && forwarded_stop_signal) {
          begin_stop(fmt::format("second {}: stopping all ranks now", common::signal_name(s)));
        } else {
          say(fmt::format("forwarding {} to {} rank{}", common::signal_name(s), world,
                          world == 1 ? "" : "s"));
          broadcast(fmt::format("SIG {}\n", s));
          if (s == SIGUSR1 || s == SIGUSR2) checkpoint_signal_sent = s;
          if (s == SIGINT || s == SIGTERM || s == SIGHUP) {
            forwarded_stop_signal = s;
            stop_deadline = now + cfg.stop_timeout;
          }
        }
      }
    }
    if (fds[1].revents & POLLIN) {
      int c;
      while ((c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0)
        conns.push_back(Conn{c, "", -1});
    }
    for (std::size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      if (c.fd < 0 || !(fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      std::vector<std::string> lines;
      bool open = proc::read_lines(c.fd, c.buf, lines);
      for (const auto& l : lines) {
        std::istringstream is(l);
        std::string kind;
        is >> kind;
        if (kind == "HELLO") {
          std::string tok, host;
          int r = -1;
          is >> tok >> r >> host;
          if (tok != token || r < 0 || r >= world || ranks[static_cast<std::size_t>(r)].started) {
            open = false;  // not one of ours
            break;
          }
          c.rank = r;
          ranks[static_cast<std::size_t>(r)].started = true;
          ranks[static_cast<std::size_t>(r)].host = host;
          ++started;
          if (stopping) common::write_all(c.fd, "STOP\n");
          if (forwarded_stop_signal)
            common::write_all(c.fd, fmt::format("SIG {}\n", forwarded_stop_signal));
        } else if (kind == "EXIT" && c.rank >= 0) {
          int r, code, sig;
          double secs;
          is >> r >> code >> sig >> secs;
          ranks[static_cast<std::size_t>(c.rank)].exited = true;
          ++exited;
          if (code != 0 || sig != 0)
            record_failure(c.rank, describe_status(code, sig), sig ? 128 + sig : code, secs);
        }
      }
      if (!open) {
        close(c.fd);
        c.fd = -1;
        if (c.rank >= 0 && !ranks[static_cast<std::size_t>(c.rank)].exited) {
          ranks[static_cast<std::size_t>(c.rank)].exited = true;
          ++exited;
          record_failure(c.rank, "was lost (its wrapper ended without reporting: killed?)", 137,
                         now - t0);
        }
      }
    }

    if (!stopping && started < world && now - t0 > cfg.start_timeout) {
      std::string missing;
      int shown = 0;
      for (int r = 0; r < world && shown < 8; ++r)
        if (!ranks[static_cast<std::size_t>(r)].started) {
          missing += fmt::format("{}{}", shown ? ", " : "", r);
          ++shown;
        }
      say(fmt::format("ranks {}{} did not start within {:.0f} s (of {} ranks {} started); stopping",
                      missing, world - started > shown ? ", ..." : "", cfg.start_timeout, world,
                      started));
      begin_stop("");
      failure = Failure{-1, "", "did not start", 1, now - t0};
    }
    if (ckpt_at > 0 && !ckpt_sent && now >= ckpt_at) {
      ckpt_sent = true;
      say(fmt::format("job time nearly over: sending {} to all ranks to checkpoint",
                      common::signal_name(cfg.checkpoint_signal)));
      broadcast(fmt::format("SIG {}\n", cfg.checkpoint_signal));
      checkpoint_signal_sent = cfg.checkpoint_signal;
    }
    if (stop_deadline > 0 && !stopping && now >= stop_deadline)
      begin_stop(fmt::format("ranks still running {:.0f} s after {}: stopping them",
                             cfg.stop_timeout, common::signal_name(forwarded_stop_signal)));
    if (term_at > 0 && now >= term_at) {
      for (pid_t p : children)
        if (!engine_status.count(p)) killpg(p, SIGTERM);
      term_at = 0;
    }
    if (kill_at > 0 && now >= kill_at) {
      for (pid_t p : children)
        if (!engine_status.count(p)) killpg(p, SIGKILL);
      kill_at = 0;
    }
  }
  if (!hostfile.empty()) unlink(hostfile.c_str());
  close(lfd);

  if (failure && failure->rank >= 0) {
    say(fmt::format("rank {} on {} {} after {:.1f} s; stopped {} other rank{}", failure->rank,
                    failure->host, failure->what, failure->seconds, stopped_others,
                    stopped_others == 1 ? "" : "s"));
    return failure->status;
  }
  if (failure) return failure->status;
  // No rank failed. The engine's own status still counts (it may have failed to start ranks).
  for (auto& [pid, st] : engine_status) {
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code != 0) {
      say(fmt::format("{} {} ({} of {} ranks started)", to_string(cmd.engine),
                      WIFEXITED(st) ? fmt::format("exited with code {}", code)
                                    : describe_status(0, WTERMSIG(st)),
                      started, world));
      return code;
    }
  }
  if (started < world) {
    say(fmt::format("{} exited but only {} of {} ranks ever started", to_string(cmd.engine),
                    started, world));
    return 1;
  }
  if (cfg.requeue && checkpoint_signal_sent) {
    std::vector<std::string> rq = requeue_command(cfg.alloc);
    if (rq.empty()) {
      say(fmt::format(
          "--requeue: no requeue command for a {} job; the checkpoint stays for a rerun",
          to_string(cfg.alloc.scheduler)));
      return 0;
    }
    std::string shown;
    for (const auto& w : rq) shown += (shown.empty() ? "" : " ") + w;
    say(fmt::format("all ranks exited 0 after {} (checkpointed): requeueing job {} ({})",
                    common::signal_name(checkpoint_signal_sent), *cfg.alloc.job_id, shown));
    int rc = run_and_wait(rq, cfg.env);
    if (rc != 0) {
      say(fmt::format("'{}' failed with status {}: the job was not requeued", shown, rc));
      return rc;
    }
  }
  return 0;
}

}  // namespace gpurun::launcher

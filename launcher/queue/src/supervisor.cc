// Per-job supervisor (supervisor.h). Single-threaded: every signal it cares about is blocked and
// taken with sigtimedwait, so deadlines and events are handled in one loop without handlers.
#include "supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "gpurun/queue/protocol.h"
#include "runfiles.h"

namespace gpurun::queue {
static_assert(kForwardSignal == SIGUSR1, "kForwardSignal must be SIGUSR1");

namespace {

struct Spec {
  int64_t job_id = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string user, cwd, script_path, script, output, error;
  std::vector<std::string> args;
  std::vector<std::string> env;  // KEY=VALUE
  int64_t start_ms = 0, time_limit_s = 0;
  int signal = 0, lead_s = 60;
  bool batch_only = false;
  int kill_wait_s = 30;
  bool drop_privileges = false;
};

Spec load_spec(const std::string& path) {
  auto text = read_file(path);
  if (!text) throw std::runtime_error(fmt::format("job spec {} is missing", path));
  auto o = nlohmann::json::parse(*text);
  Spec s;
  s.job_id = o.at("job_id");
  s.uid = o.at("uid");
  s.gid = o.at("gid");
  s.user = o.at("user");
  s.cwd = o.at("cwd");
  s.script_path = o.at("script_path");
  s.script = o.at("script");
  s.output = o.at("output");
  s.error = o.at("error");
  s.args = o.at("args").get<std::vector<std::string>>();
  for (auto& [k, v] : o.at("env").items()) s.env.push_back(k + "=" + v.get<std::string>());
  s.start_ms = o.at("start_ms");
  s.time_limit_s = o.at("time_limit_s");
  s.signal = o.at("signal");
  s.lead_s = o.at("lead_seconds");
  s.batch_only = o.at("batch_only");
  s.kill_wait_s = o.at("kill_wait_s");
  s.drop_privileges = o.at("drop_privileges");
  return s;
}

// Child side between fork and exec: report the failed step on the pipe and exit 1 (Slurm reports
// setup failures such as an unwritable output file as exit code 1).
[[noreturn]] void child_fail(int pipe_fd, const char* step, const std::string& arg) {
  std::string msg = fmt::format("{} {}: {}", step, arg, strerror(errno));
  ssize_t ignored = ::write(pipe_fd, msg.data(), msg.size());
  (void)ignored;
  _exit(1);
}

int open_output(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

[[noreturn]] void exec_job(const Spec& s, int pipe_fd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
  setpgid(0, 0);
  if (s.drop_privileges) {
    if (initgroups(s.user.c_str(), s.gid) != 0) child_fail(pipe_fd, "initgroups", s.user);
    if (setgid(s.gid) != 0) child_fail(pipe_fd, "setgid", std::to_string(s.gid));
    if (setuid(s.uid) != 0) child_fail(pipe_fd, "setuid", std::to_string(s.uid));
  }
  if (chdir(s.cwd.c_str()) != 0) child_fail(pipe_fd, "chdir", s.cwd);
  int in = ::open("/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0) child_fail(pipe_fd, "open", "/dev/null");
  int out = open_output(s.output);
  if (out < 0 || dup2(out, 1) < 0) child_fail(pipe_fd, "open output", s.output);
  int err = s.error.empty() ? out : open_output(s.error);
  if (err < 0 || dup2(err, 2) < 0) child_fail(pipe_fd, "open error", s.error);
  std::vector<char*> argv{const_cast<char*>(s.script_path.c_str())};
  for (const auto& a : s.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : s.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  execve(s.script_path.c_str(), argv.data(), envp.data());
  child_fail(pipe_fd, "exec", s.script_path);
}

// The script is copied where the (unprivileged) job can execute it: STATE/spool is 0711 and the
// file belongs to the user, mode 0500.
void write_script(const Spec& s) {
  ::unlink(s.script_path.c_str());
  Fd fd(::open(s.script_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0700));
  if (!fd) throw std::runtime_error(fmt::format("create {}: {}", s.script_path, strerror(errno)));
  if (::write(fd.get(), s.script.data(), s.script.size()) != static_cast<ssize_t>(s.script.size()))
    throw std::runtime_error(fmt::format("write {}: {}", s.script_path, strerror(errno)));
  if (s.drop_privileges && fchown(fd.get(), s.uid, s.gid) != 0)
    throw std::runtime_error(fmt::format("chown {}: {}", s.script_path, strerror(errno)));
  fchmod(fd.get(), 0500);
}

}  // namespace

int run_supervisor(const std::string& run_dir, int64_t job_id, int lock_fd) {
  fcntl(lock_fd, F_SETFD, FD_CLOEXEC);  // the lock must not leak into the job
  signal(SIGCHLD, SIG_DFL);             // the daemon ignores SIGCHLD; we need wait statuses
  // Orphans of the job are re-parented here, so "every process has exited" can be waited for.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGPIPE})
    sigaddset(&set, sig);
  sigprocmask(SIG_BLOCK, &set, nullptr);

  RunPaths paths = run_paths(run_dir, job_id);
  Spec s = load_spec(paths.spec);
  SupervisorStatus st;
  st.phase = "running";
  st.supervisor_pid = getpid();
  // Written before the job exists: a daemon that finds no status knows nothing of the job ran.
  write_file_atomic(paths.status, status_to_json(st).dump(), false);

  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  try {
    write_script(s);
  } catch (const std::exception& e) {
    st.reason = e.what();
  }
  pid_t child = -1;
  if (st.reason.empty()) {
    child = fork();
    if (child < 0) throw std::runtime_error(fmt::format("fork: {}", strerror(errno)));
    if (child == 0) {
      ::close(pipefd[0]);
      exec_job(s, pipefd[1]);
    }
    setpgid(child, child);  // also from here, so signals never race the child's own setpgid
  }
  ::close(pipefd[1]);
  char buf[1024];
  ssize_t n;
  std::string setup_error;
  while ((n = ::read(pipefd[0], buf, sizeof(buf))) > 0) setup_error.append(buf, n);
  ::close(pipefd[0]);
  if (!setup_error.empty()) st.reason = setup_error;
  st.pgid = child > 0 ? child : 0;
  if (child > 0) write_file_atomic(paths.status, status_to_json(st).dump(), false);

  const int64_t kNone = INT64_MAX;
  int64_t signal_at = kNone, limit_at = kNone, kill_at = kNone;
  if (s.time_limit_s > 0) {
    limit_at = s.start_ms + s.time_limit_s * 1000;
    if (s.signal > 0) signal_at = limit_at - int64_t{s.lead_s} * 1000;
  }
  auto kill_group = [&](int sig) {
    if (child > 0) ::kill(-child, sig);
  };
  int wstatus = 0;
  bool exited = child <= 0;
  if (child <= 0) st.exit_code = 1;
  while (!exited) {
    int64_t now = now_ms();
    if (now >= signal_at) {
      ::kill(s.batch_only ? child : -child, s.signal);
      signal_at = kNone;
    }
    if (now >= limit_at) {
      st.timed_out = true;
      kill_group(SIGTERM);
      kill_group(SIGCONT);
      kill_at = now + int64_t{s.kill_wait_s} * 1000;
      limit_at = kNone;
    }
    if (now >= kill_at) {
      kill_group(SIGKILL);
      kill_at = kNone;
    }
    int64_t next = std::min({signal_at, limit_at, kill_at});
    int64_t wait_ms = next == kNone ? 60000 : std::max<int64_t>(0, next - now_ms());
    timespec ts{static_cast<time_t>(wait_ms / 1000), static_cast<long>((wait_ms % 1000) * 1000000)};
    siginfo_t info{};
    int sig = sigtimedwait(&set, &info, &ts);
    if (sig == SIGTERM && !st.cancelled && kill_at == kNone) {
      st.cancelled = true;  // scancel: SIGTERM to the group, SIGKILL after KillWait
      kill_group(SIGTERM);
      kill_group(SIGCONT);
      kill_at = now_ms() + int64_t{s.kill_wait_s} * 1000;
    } else if (sig == SIGUSR1 && info.si_code == SI_QUEUE) {
      int fwd = info.si_value.sival_int;
      if (fwd > 0 && fwd < NSIG) kill_group(fwd);
    }
    // Reap whatever exited: the job's batch shell, or orphans re-parented to us.
    pid_t p;
    int ws;
    while ((p = waitpid(-1, &ws, WNOHANG)) > 0) {
      if (p == child) {
        wstatus = ws;
        exited = true;
      }
    }
  }
  if (child > 0) {
    // Like Slurm, processes the script left behind die with it: the GPUs must be free before the
    // daemon hands them to the next job.
    // Also anything still in our session (a process that left the group) or re-parented to us;
    // bounded, since a process in uninterruptible sleep cannot be waited out forever.
    int64_t give_up = now_ms() + 10000;
    while (now_ms() < give_up) {
      kill_group(SIGKILL);
      auto left = find_job_processes(getpid(), child, getpid());
      for (int pid : left) ::kill(pid, SIGKILL);
      while (waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      if (left.empty()) break;  // one /proc scan when the job left nothing behind
      usleep(5000);
    }
    if (WIFEXITED(wstatus)) {
      st.exit_code = WEXITSTATUS(wstatus);
    } else if (WIFSIGNALED(wstatus)) {
      st.exit_code = 0;
      st.exit_signal = WTERMSIG(wstatus);
    }
  }
  ::unlink(s.script_path.c_str());
  rusage ru{};
  if (getrusage(RUSAGE_CHILDREN, &ru) == 0) {
    st.cpu_seconds =
        ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    st.max_rss_kb = ru.ru_maxrss;
  }
  st.phase = "done";
  st.end_ms = now_ms();
  // No fsync: a process crash cannot lose page-cache data, and after a power loss the daemon
  // sees a new boot id and reports the job NODE_FAIL instead of trusting these files.
  write_file_atomic(paths.status, status_to_json(st).dump(), false);
  return 0;
}

}  // namespace gpurun::queue

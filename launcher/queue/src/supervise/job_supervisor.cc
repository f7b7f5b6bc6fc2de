// Per-job supervisor (supervisor.h). Single-threaded: every signal it cares about is blocked and
// taken with sigtimedwait, so deadlines and events are handled in one loop without handlers.
#include "supervise/job_supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "gpurun/common/atomic_file.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/terminal.h"
#include "gpurun/gpuinfo/proc_usage.h"
#include "gpurun/queue/protocol.h"
#include "supervise/attach.h"
#include "supervise/runfiles.h"
#include "supervise/supervisor_spec.h"

namespace gpurun::queue {
static_assert(kForwardSignal == SIGUSR1, "kForwardSignal must be SIGUSR1");

namespace {

// Child side between fork and exec: report the failed step on the pipe and exit 1 (Slurm reports
// setup failures such as an unwritable output file as exit code 1).
[[noreturn]] void child_fail(int pipe_fd, const char* step, const std::string& arg) {
  std::string msg = fmt::format("{} {}: {}", step, arg, strerror(errno));
  ssize_t ignored = ::write(pipe_fd, msg.data(), msg.size());
  (void)ignored;
  _exit(1);
}

[[noreturn]] void child_refuse(int pipe_fd, const std::string& msg) {
  ssize_t ignored = ::write(pipe_fd, msg.data(), msg.size());
  (void)ignored;
  _exit(1);
}

// A directory where another user can make a name first: one anyone may write to (/tmp, sticky
// or not), a group may (a project's folder; not the user's own primary group, as Debian's user
// private groups), or another user's (not root's). A review's world-writable folder without the
// sticky bit let a planted symlink have the job overwrite the user's private file.
bool shared_dir(const std::string& path, std::string* dir, struct stat* ds) {
  const auto slash = path.rfind('/');
  *dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  return ::stat(dir->c_str(), ds) == 0 &&
         ((ds->st_mode & S_IWOTH) != 0 || ((ds->st_mode & S_IWGRP) && ds->st_gid != getegid()) ||
          (ds->st_uid != geteuid() && ds->st_uid != 0));
}

// Why the file open as fd, the name `path` in the shared directory `dir`, is not the user's to
// write, or "" when it is.
std::string foreign(int fd, const std::string& path, const std::string& dir) {
  struct stat fs {};
  if (::fstat(fd, &fs) != 0) return "";
  if (fs.st_uid != geteuid() && fs.st_uid != 0) {
    const auto owner = common::passwd_entry(static_cast<std::uint32_t>(fs.st_uid));
    return fmt::format(
        "refusing output file {}: it belongs to {}, and the shared directory "
        "{} lets others make a name there first",
        path,
        owner ? fmt::format("{} (uid {})", common::escape_control(owner->name), fs.st_uid)
              : fmt::format("uid {}", fs.st_uid),
        dir);
  }
  if (S_ISREG(fs.st_mode) && fs.st_nlink > 1)  // another name for a file elsewhere
    return fmt::format("refusing output file {}: a hard link ({} names) in the shared directory "
                       "{}, where another user may have made it to one of your files",
                       path, fs.st_nlink, dir);
  return "";
}

// Whether `path` is still the symlink `link` checked before, naming what fd has open: in a
// folder without the sticky bit another user can swap the name between the check and the open.
bool still_the_link(const std::string& path, const struct stat& link, int fd) {
  struct stat now_link = {}, now_target = {}, opened = {};
  return ::lstat(path.c_str(), &now_link) == 0 && S_ISLNK(now_link.st_mode) &&
         now_link.st_ino == link.st_ino && now_link.st_dev == link.st_dev &&
         ::stat(path.c_str(), &now_target) == 0 && ::fstat(fd, &opened) == 0 &&
         now_target.st_ino == opened.st_ino && now_target.st_dev == opened.st_dev;
}

// Output goes to a file or a terminal (/dev/null too): a FIFO or socket could block the job's
// setup, or the supervisor's reason line, while the job holds its GPUs.
std::string not_a_file(const struct stat& st, const std::string& path) {
  if (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) return "";
  return fmt::format(
      "refusing output file {}: {}; gpuq writes a job's output to files and "
      "terminals",
      path,
      S_ISFIFO(st.st_mode)  ? "a FIFO"
      : S_ISDIR(st.st_mode) ? "a directory"
                            : "not a regular file");
}

// Created as the user with the user's umask (set before), as Slurm creates them. In a shared
// directory (shared_dir: /tmp, a group's, another user's), a name another user made first is
// refused, as the kernel's protected_symlinks and protected_regular would in sticky ones (many
// hosts run without them): a symlink there is followed only when it belongs to the user or root,
// and an existing file there only when it does; else another user could have the job overwrite a
// file of the user's, or read the job's output. Otherwise `why` is empty and -1 means errno.
int open_output(const std::string& path, bool append, std::string* why) {
  std::string dir;
  struct stat ds {};
  const bool shared = shared_dir(path, &dir, &ds);
  // Non-blocking: a FIFO under the name would otherwise hold the open, and the job's GPUs,
  // forever (no cancel or time limit reaches a supervisor waiting for the job's setup).
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : 0) |
                    (shared ? O_NOFOLLOW : 0);
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0 && (*why = not_a_file(before, path)) != "") return -1;
  int fd = ::open(path.c_str(), flags, 0666);
  const int open_errno = errno;
  struct stat ls {};
  // O_CREAT | O_NOFOLLOW on a symlink: ELOOP, or EACCES from some kernels. A symlink the user or
  // root made is followed, to whatever it names, if it is still that link once opened.
  const bool link = fd < 0 && shared && (errno == ELOOP || errno == EACCES) &&
                    ::lstat(path.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode);
  if (link && ls.st_uid != geteuid() && ls.st_uid != 0) {
    *why = fmt::format("refusing output file {}: a symlink that uid {} made in the shared "
                       "directory {}",
                       path, ls.st_uid, dir);
    return -1;
  }
  if (link) fd = ::open(path.c_str(), flags & ~O_NOFOLLOW, 0666);
  if (fd < 0) {
    if (!link) errno = open_errno;
    return -1;
  }
  if (link && !still_the_link(path, ls, fd))
    *why = fmt::format(
        "refusing output file {}: the symlink in the shared directory {} changed "
        "while it was opened",
        path, dir);
  if (shared && !link) *why = foreign(fd, path, dir);
  struct stat opened {};
  if (why->empty() && ::fstat(fd, &opened) == 0) *why = not_a_file(opened, path);
  if (!why->empty()) return ::close(fd), -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (!append && ::ftruncate(fd, 0) != 0 && errno != EINVAL) {  // EINVAL: a terminal, a pipe
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// Hands the job's stderr to the supervisor (SCM_RIGHTS): it writes Slurm's reason line there
// without opening the user's file as root.
void send_fd(int sock, int fd) {
  const char byte = 0;
  ssize_t ignored = send_with_fds(sock, std::string_view(&byte, 1), {fd});
  (void)ignored;
}

// How long the job's child may take from fork to exec (initgroups, chdir, opening the output
// files): meanwhile no cancel or time limit reaches it.
constexpr int64_t kSetupTimeoutMs = 60000;

// What the job's child said before exec: its stderr (send_fd), and why it failed, if it did;
// nullopt when it said nothing for kSetupTimeoutMs.
std::optional<std::string> read_setup(int sock, Fd* stderr_fd) {
  std::string text;
  const int64_t give_up = now_ms() + kSetupTimeoutMs;
  while (true) {
    const int64_t left = give_up - now_ms();
    if (left <= 0) return std::nullopt;
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, int(left)) <= 0) continue;  // the time is up, or EINTR
    char buf[1024];
    std::vector<Fd> fds;
    const ssize_t n = recv_with_fds(sock, buf, sizeof(buf), 0, &fds);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!fds.empty()) *stderr_fd = std::move(fds.back());
    text.append(buf, static_cast<size_t>(n));
  }
  text.erase(std::remove(text.begin(), text.end(), '\0'), text.end());
  return text;
}

// Slurm's line in the job's output when it stops a job (slurmstepd's, word for word):
// "slurmstepd: error: *** JOB 12 ON host CANCELLED AT 2026-11-25T10:00:00 DUE TO TIME LIMIT ***".
void write_reason_line(int fd, const SupervisorSpec& s, const char* due_to) {
  if (fd < 0) return;
  time_t now = time(nullptr);
  tm local{};
  localtime_r(&now, &local);
  char when[32];
  strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &local);
  std::string line = fmt::format("slurmstepd: error: *** JOB {} ON {} CANCELLED AT {}{} ***\n",
                                 s.job_id, s.host, when, due_to);
  // Never blocking: the job's SIGTERM and SIGKILL come after it. A terminal (gpuq run --pty
  // whose client stopped reading) is written through an opening of its own, non-blocking (the
  // job's shares its flags); files, the only other kind, do not block.
  struct stat st {};
  Fd own;
  if (::fstat(fd, &st) == 0 && S_ISCHR(st.st_mode)) {
    own = Fd(::open(fmt::format("/proc/self/fd/{}", fd).c_str(),
                    O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!own) return;
    fd = own.get();
  }
  ssize_t ignored = ::write(fd, line.data(), line.size());
  (void)ignored;
}

// Nothing but stdin, stdout and stderr reaches the job, as under Slurm: not the supervisor's own
// descriptors (the report pipe stays usable until the exec) and not what whoever started the
// daemon left open without close-on-exec. close_range marks them all at once (Linux 5.11); on an
// older kernel, one fcntl per possible descriptor.
void close_inherited() {
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  rlimit lim{};
  const rlim_t top =
      getrlimit(RLIMIT_NOFILE, &lim) == 0 ? std::min<rlim_t>(lim.rlim_cur, 1 << 20) : 1024;
  for (rlim_t fd = 3; fd < top; ++fd) fcntl(int(fd), F_SETFD, FD_CLOEXEC);
}

// Standard input, output and error: /dev/null and the output files, as for a batch job, or gpuq
// run's (`stdio`), whose terminal with --pty becomes the job's controlling terminal.
void open_stdio(const SupervisorSpec& s, const std::vector<Fd>& stdio, int pipe_fd) {
  if (!stdio.empty()) {
    for (int i = 0; i < 3; ++i)
      if (dup2(stdio[size_t(i)].get(), i) < 0) child_fail(pipe_fd, "dup2", "gpuq run's stdio");
    if (s.attach.pty && ioctl(0, TIOCSCTTY, 0) != 0)
      child_fail(pipe_fd, "TIOCSCTTY", "gpuq run's terminal");
    return;
  }
  int in = ::open("/dev/null", O_RDONLY);  // not O_CLOEXEC: it may be fd 0 itself
  if (in < 0 || dup2(in, 0) < 0) child_fail(pipe_fd, "open", "/dev/null");
  std::string why;
  int out = open_output(s.output, s.append_output, &why);
  if (!why.empty()) child_refuse(pipe_fd, why);
  if (out < 0 || dup2(out, 1) < 0) child_fail(pipe_fd, "open output", s.output);
  // The same file for both (-o f -e f) is opened once, as Slurm does: two openings would each
  // write from offset 0 over the other.
  int err = s.error.empty() || s.error == s.output ? out
                                                   : open_output(s.error, s.append_output, &why);
  if (!why.empty()) child_refuse(pipe_fd, why);
  if (err < 0 || dup2(err, 2) < 0) child_fail(pipe_fd, "open error", s.error);
}

// `env` is s.env as KEY=VALUE lines, made before the fork.
[[noreturn]] void exec_job(const SupervisorSpec& s, const std::vector<std::string>& env,
                           const std::vector<Fd>& stdio, int pipe_fd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
  // A terminal needs a session of its own; its process group is then this pid too.
  if (s.attach.pty ? setsid() < 0 : setpgid(0, 0) != 0) child_fail(pipe_fd, "setsid", "");
  if (s.drop_privileges) {
    if (initgroups(s.user.c_str(), s.gid) != 0) child_fail(pipe_fd, "initgroups", s.user);
    if (setgid(s.gid) != 0) child_fail(pipe_fd, "setgid", std::to_string(s.gid));
    if (setuid(s.uid) != 0) child_fail(pipe_fd, "setuid", std::to_string(s.uid));
  }
  umask(s.umask);
  if (chdir(s.cwd.c_str()) != 0) child_fail(pipe_fd, "chdir", s.cwd);
  open_stdio(s, stdio, pipe_fd);
  send_fd(pipe_fd, 2);
  close_inherited();
  std::vector<char*> argv{const_cast<char*>(s.script_path.c_str())};
  for (const auto& a : s.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  execve(s.script_path.c_str(), argv.data(), envp.data());
  child_fail(pipe_fd, "exec", s.script_path);
}

// The script is copied where the (unprivileged) job can execute it: STATE/spool is 0711 and the
// file belongs to the user, mode 0500.
void write_script(const SupervisorSpec& s) {
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

namespace {

// Forks the job (exec_job) and waits until it has exec'd or said why it could not. Returns its
// pid (-1 when it did not start: st->reason says why) and its stderr in *job_stderr.
pid_t start_job(const SupervisorSpec& s, std::vector<Fd> stdio, SupervisorStatus* st,
                Fd* job_stderr) {
  try {
    write_script(s);
  } catch (const std::exception& e) {
    st->reason = e.what();
    return -1;
  }
  std::vector<std::string> env;
  for (const auto& [k, v] : s.env) env.push_back(k + "=" + v);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::runtime_error(fmt::format("socketpair: {}", strerror(errno)));
  pid_t child = fork();
  if (child < 0) throw std::runtime_error(fmt::format("fork: {}", strerror(errno)));
  if (child == 0) {
    ::close(sv[0]);
    exec_job(s, env, stdio, sv[1]);
  }
  stdio.clear();  // the job's copies only: a terminal hangs up when the job's last one closes
  // Also from here, so signals never race the child's own setpgid; a session leader to be
  // (--pty) must not lead a group first.
  if (!s.attach.pty) setpgid(child, child);
  // Its start time, read while it cannot have been reaped: with it a later daemon tells the job's
  // process group from another that got the same number.
  st->pgid_start = common::process_start_time(child).value_or(0);
  ::close(sv[1]);
  Fd setup(sv[0]);
  if (auto said = read_setup(setup.get(), job_stderr)) {
    st->reason = *said;
    return child;
  }
  ::kill(-child, SIGKILL);
  ::kill(child, SIGKILL);  // before its setpgid, the group is not there yet
  for (int i = 0; i < 500 && waitpid(child, nullptr, WNOHANG) == 0; ++i) usleep(10000);  // 5 s
  st->reason = fmt::format("the job's setup (its folder, its output files) did not finish in {} s",
                           kSetupTimeoutMs / 1000);
  return -1;
}

// gpuq run's client: how often the supervisor looks at it, and how long a job whose client went
// away gets between SIGTERM and SIGKILL (its GPUs must be free within 5 s).
constexpr int64_t kClientPollMs = 100;
constexpr int kAttachTimeoutMs = 10000;  // for the client's answer to the supervisor's hello
constexpr int64_t kClientGoneKillMs = 2000;

// A job signal as Slurm delivers one without B: (--signal) or --batch (scancel --signal): not to
// the batch shell, whose default action for USR1 would end the job, but to the rest of the job's
// process group (its programs, and srun, which passes it to its tasks). A gpuq run job has no
// batch shell: its command gets it with the rest.
void signal_job(const SupervisorSpec& s, pid_t child, int sig) {
  if (!s.attach.socket.empty()) {
    ::kill(-child, sig);
    return;
  }
  for (const auto& p : gpuinfo::scan_processes())
    if (p.pgid == child && p.pid != child && p.state != 'Z') ::kill(p.pid, sig);
}

// What gpuq run's client sent: signals for the job ("SIG n"). False once it is gone; the job is
// then recorded as cancelled, and why.
bool client_said(LineReader& client, pid_t child, SupervisorStatus* st) {
  std::vector<std::string> lines;
  const bool alive = client.poll_lines(&lines);
  for (const auto& line : lines) {
    char* end = nullptr;
    const long sig = line.rfind("SIG ", 0) == 0 ? std::strtol(line.c_str() + 4, &end, 10) : 0;
    if (end && *end == '\0' && common::is_signal_number(sig)) ::kill(-child, int(sig));
  }
  if (alive) return true;
  if (!st->cancelled && !st->timed_out) {
    st->cancelled = true;
    st->reason = "gpuq run's client went away";
  }
  return false;
}

// The job's lifetime: time limit (--signal lead, SIGTERM, SIGKILL after KillWait), cancel,
// forwarded signals; returns the batch shell's wait status.
int supervise(const SupervisorSpec& s, pid_t child, const sigset_t& set, int job_stderr,
              LineReader* client, SupervisorStatus* st) {
  const int64_t kNone = INT64_MAX;
  int64_t signal_at = kNone, limit_at = kNone, kill_at = kNone;
  if (s.time_limit_s > 0) {
    limit_at = s.start_ms + s.time_limit_s * 1000;
    if (s.signal.signal > 0) signal_at = limit_at - int64_t{s.signal.lead_seconds} * 1000;
  }
  auto stop = [&](const char* due_to, int64_t wait_ms) {  // Slurm's scancel and time limit
    write_reason_line(job_stderr, s, due_to);
    ::kill(-child, SIGTERM);
    ::kill(-child, SIGCONT);
    kill_at = now_ms() + wait_ms;
  };
  const int64_t kill_wait_ms = int64_t{s.kill_wait_s} * 1000;
  while (true) {
    int64_t now = now_ms();
    if (now >= signal_at) {
      if (s.signal.batch_only)
        ::kill(child, s.signal.signal);
      else
        signal_job(s, child, s.signal.signal);
      signal_at = kNone;
    }
    if (now >= limit_at) {
      st->timed_out = true;
      stop(" DUE TO TIME LIMIT", kill_wait_ms);
      limit_at = kNone;
    }
    if (now >= kill_at) {
      ::kill(-child, SIGKILL);
      kill_at = kNone;
    }
    int64_t next = std::min({signal_at, limit_at, kill_at});
    int64_t wait_ms = next == kNone ? 60000 : std::max<int64_t>(0, next - now_ms());
    if (client) wait_ms = std::min<int64_t>(wait_ms, kClientPollMs);
    timespec ts{static_cast<time_t>(wait_ms / 1000), static_cast<long>((wait_ms % 1000) * 1000000)};
    siginfo_t info{};
    int sig = sigtimedwait(&set, &info, &ts);
    if (sig == SIGTERM && !st->cancelled && !st->timed_out) {
      st->cancelled = true;
      const bool requeue = info.si_code == SI_QUEUE && info.si_value.sival_int == kStopForRequeue;
      stop(requeue ? " DUE TO JOB REQUEUE" : "", kill_wait_ms);
    } else if (sig == SIGUSR1 && info.si_code == SI_QUEUE) {
      const int fwd = info.si_value.sival_int;  // the daemon sends 1-64 only
      if (fwd > 0 && fwd < NSIG) signal_job(s, child, fwd);
    }
    if (client && !client_said(*client, child, st)) {
      client = nullptr;  // gone: the job ends with it, as srun's steps end with srun
      stop("", kClientGoneKillMs);
    }
    // Reap whatever exited: the job's batch shell, or orphans re-parented to us.
    pid_t p;
    int ws;
    while ((p = waitpid(-1, &ws, WNOHANG)) > 0)
      if (p == child) return ws;
  }
}

// Every process the job left ends up a child of ours once its parent is gone (the subreaper):
// SIGKILLs our children, as fast as they come, until none is left (nothing to do where the
// kernel lists no children: no CONFIG_PROC_CHILDREN; the scans after it remain). A review saw a
// chain that forks and exits in a tight loop outrun the /proc scans.
void kill_children(int64_t give_up) {
  const std::string path = fmt::format("/proc/self/task/{}/children", getpid());
  for (int turn = 0; now_ms() < give_up; ++turn) {
    const auto text = common::read_file(path);
    if (!text) return;
    std::istringstream pids(*text);
    int pid = 0, found = 0;
    while (pids >> pid) found += ::kill(pid, SIGKILL) == 0;  // a child's pid: not yet reusable
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (!found) return;
    if (turn > 1000) usleep(1000);  // one stuck in uninterruptible sleep: no busy loop
  }
}

// Like Slurm, processes the script left behind die with it: the GPUs must be free before the
// daemon hands them to the next job. That is its process group, anything still in our session (a
// process that left the group) and anything re-parented to us; bounded, since a process in
// uninterruptible sleep cannot be waited out forever.
void kill_leftovers(pid_t child, bool own_session, const SupervisorStatus& st) {
  // A --pty job leads a session of its own (its shell's job control puts pipelines in groups of
  // their own there); a batch job stays in ours.
  const JobProcesses job =
      own_session ? JobProcesses{child, child, getpid(), st.pgid_start, st.pgid_start}
                  : JobProcesses{getpid(), child, getpid(), st.supervisor_start, st.pgid_start};
  int64_t give_up = now_ms() + 10000;
  // A child that SIGKILL cannot end (uninterruptible sleep, threads in a driver) may keep its
  // own children: the scans below must still come, so the children get 2 s of the 10.
  kill_children(now_ms() + 2000);
  while (now_ms() < give_up) {
    const size_t left = kill_job_processes(job);
    pid_t reaped;
    while ((reaped = waitpid(-1, nullptr, WNOHANG)) > 0) {
    }
    // Done when a scan found none and no child is left: every process the job made is a child
    // of ours once its parent is gone (the subreaper), so ECHILD means none lives. One empty
    // scan could miss a chain caught mid-fork.
    if (left == 0 && reaped < 0 && errno == ECHILD) break;
    usleep(5000);
  }
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
  const SupervisorSpec s = read_spec(paths.spec);
  SupervisorStatus st;
  st.phase = "running";
  st.supervisor_pid = getpid();
  st.supervisor_start = common::process_start_time(getpid()).value_or(0);
  // Written before the job exists: a daemon that finds no status knows nothing of the job ran.
  common::write_file_atomic(paths.status, status_to_json(st).dump(), 0600,
                            common::Durability::kNoSync);

  // gpuq run's client hands over its terminal first; a client that went away while the job
  // waited in the queue cancels it here, before anything ran.
  std::optional<AttachedClient> client;
  if (!s.attach.socket.empty()) {
    try {
      client = attach_to_client(s.attach, s.job_id, s.uid, kAttachTimeoutMs);
    } catch (const std::exception& e) {
      st.reason = fmt::format("gpuq run's client went away ({})", e.what());
      st.cancelled = true;
    }
  }
  Fd job_stderr;
  const pid_t child =
      st.cancelled
          ? -1
          : start_job(s, client ? std::move(client->stdio) : std::vector<Fd>{}, &st, &job_stderr);
  st.pgid = child > 0 ? child : 0;
  if (child > 0)
    common::write_file_atomic(paths.status, status_to_json(st).dump(), 0600,
                              common::Durability::kNoSync);
  st.exit_code = 1;  // a job that did not start
  if (child > 0) {
    std::optional<LineReader> from_client;
    if (client) from_client.emplace(client->sock.get());
    const int wstatus =
        supervise(s, child, set, job_stderr.get(), from_client ? &*from_client : nullptr, &st);
    kill_leftovers(child, s.attach.pty, st);
    st.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 0;
    st.exit_signal = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
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
  common::write_file_atomic(paths.status, status_to_json(st).dump(), 0600,
                            common::Durability::kNoSync);
  if (client) {  // recorded first: the client exits on this line, and may ask about the job
    try {
      send_line(client->sock.get(), fmt::format("EXIT {} {}\n", st.exit_code, st.exit_signal));
    } catch (const std::exception&) {  // gone meanwhile: it learns the end from the daemon
    }
  }
  return 0;
}

}  // namespace gpurun::queue

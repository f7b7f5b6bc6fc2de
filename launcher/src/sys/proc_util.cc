// proc_util.cc: see proc_util.h.
#include "sys/proc_util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gpurun/gpuinfo/proc_usage.h"

namespace gpurun::launcher::proc {
namespace {

int g_sig_write = -1;  // the write end of the one SignalPipe, for the handler

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  if (g_sig_write >= 0) (void)!write(g_sig_write, &b, 1);
  errno = saved;
}

// In a fresh child: every caught signal back to its default, so a signal that arrives before the
// exec cannot run the parent's handler (which writes to the parent's signal pipe).
void reset_caught_signals() {
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction old {};
    if (sigaction(s, nullptr, &old) != 0) continue;
    if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) signal(s, SIG_DFL);
  }
}

}  // namespace

SignalPipe::SignalPipe(std::vector<int> signals) : signals_(std::move(signals)) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(fmt::format("signal pipe: {}", strerror(errno)));
  read_.reset(fds[0]);
  write_.reset(fds[1]);
  g_sig_write = write_.get();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : signals_) sigaction(s, &sa, nullptr);
}

SignalPipe::~SignalPipe() {
  restore_default_signals(signals_);
  g_sig_write = -1;
}

std::vector<int> SignalPipe::drain() {
  std::vector<int> out;
  unsigned char buf[64];
  ssize_t n;
  while ((n = read(read_.get(), buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; ++i) out.push_back(buf[i]);
  return out;
}

void restore_default_signals(const std::vector<int>& signals) {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int s : signals) sigaction(s, &sa, nullptr);
}

namespace {

// A name without '/' is looked up on PATH: "No such file or directory" would suggest the file
// named is missing, where it may sit in the working folder.
std::string exec_reason(const std::string& program, int e) {
  const bool on_path = !program.empty() && program.find('/') == std::string::npos;
  return on_path && e == ENOENT ? "not found on PATH" : strerror(e);
}

}  // namespace

ExecError::ExecError(const std::string& program, int e, const std::string& host,
                     const std::string& hint)
    : Error(fmt::format("cannot run '{}'{}: {}{}", program, host.empty() ? "" : " on " + host,
                        exec_reason(program, e), hint.empty() ? "" : " (" + hint + ")")),
      err(e) {}

Child Child::spawn(const std::vector<std::string>& argv, const Env& env,
                   const std::function<void()>& in_child) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", strerror(errno)));
  common::Fd rd(p[0]), wr(p[1]);
  pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("fork: {}", strerror(errno)));
  if (pid == 0) {
    reset_caught_signals();
    // Own process group: a terminal's Ctrl-C reaches the parent alone, which forwards it once.
    setpgid(0, 0);
    int err = 0;
    try {
      if (in_child) in_child();
      err = exec_program(argv, env);
    } catch (...) {
      err = errno ? errno : EINVAL;
    }
    // The exec failed: the parent reads why from the pipe (closed by a successful exec).
    (void)!write(wr.get(), &err, sizeof err);
    _exit(err == ENOENT ? 127 : 126);
  }
  setpgid(pid, pid);  // both sides, so the group exists whichever runs first
  wr.reset();
  Child c;
  c.pid_ = pid;
  int err = 0;
  ssize_t n;
  while ((n = read(rd.get(), &err, sizeof err)) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof err)) {
    c.wait();
    throw ExecError(argv.empty() ? "" : argv[0], err);
  }
  return c;
}

Child::Child(Child&& o) noexcept : pid_(o.pid_), status_(o.status_) {
  o.pid_ = -1;
}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    kill_and_reap();
    pid_ = o.pid_;
    status_ = o.status_;
    o.pid_ = -1;
  }
  return *this;
}

Child::~Child() {
  kill_and_reap();
}

void Child::kill_and_reap() noexcept {
  if (!running()) return;
  killpg(pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int st = 0;
  while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  status_ = st;
}

bool Child::reaped(pid_t pid, int status) {
  if (pid != pid_ || status_) return false;
  status_ = status;
  return true;
}

bool Child::poll_exit() {
  if (!running()) return status_.has_value();
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
  return status_.has_value();
}

void Child::signal(int sig) const {
  if (running()) kill(pid_, sig);
}

void Child::signal_group(int sig) const {
  if (running()) killpg(pid_, sig);
}

int Child::wait() {
  if (!running()) return status_.value_or(0);
  int st = 0;
  while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  status_ = st;
  return st;
}

int exit_code(int st) {
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TempFile TempFile::create(const std::string& prefix, std::string_view contents,
                          const std::string& what) {
  std::string tmpl = "/tmp/" + prefix + "XXXXXX";
  common::Fd fd(mkostemp(tmpl.data(), O_CLOEXEC));
  if (!fd) throw Error(fmt::format("cannot create {} in /tmp: {}", what, strerror(errno)));
  TempFile f;
  f.path_ = tmpl;  // owned from here: removed on the error below too
  if (!common::write_all(fd.get(), contents))
    throw Error(fmt::format("cannot write {} {}: {}", what, tmpl, strerror(errno)));
  return f;
}

TempFile& TempFile::operator=(TempFile&& o) noexcept {
  if (this != &o) {
    if (!path_.empty()) unlink(path_.c_str());
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

TempFile::~TempFile() {
  if (!path_.empty()) unlink(path_.c_str());
}

TempDir TempDir::create(const std::string& parent, const std::string& prefix,
                        const std::string& what) {
  std::string tmpl = parent + "/" + prefix + "XXXXXX";
  if (!mkdtemp(tmpl.data()))
    throw Error(fmt::format("cannot create {} in {}: {}", what, parent, strerror(errno)));
  TempDir d;
  d.path_ = tmpl;
  return d;
}

namespace {

// "pPID.START", or "pPID" when /proc does not say when this process started.
std::string owner_tag() {
  auto me = gpuinfo::read_proc_stat(static_cast<int>(getpid()));
  return me && me->start_ticks > 0 ? fmt::format("p{}.{}", getpid(), me->start_ticks)
                                   : fmt::format("p{}", getpid());
}

// Whether the process that named a folder "...pPID.START-..." is gone: no process PID, or one
// that started at another time. Without ".START" (an older gpurun, or no /proc), or when /proc
// cannot say, it counts as gone only when no process has the pid.
bool owner_gone(const std::string& after_prefix) {
  if (after_prefix.empty() || after_prefix[0] != 'p') return false;
  char* end = nullptr;
  const long pid = std::strtol(after_prefix.c_str() + 1, &end, 10);
  if (pid <= 0 || end == after_prefix.c_str() + 1) return false;
  const bool no_pid = kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  if (*end != '.' || no_pid) return no_pid;
  const long long start = std::strtoll(end + 1, nullptr, 10);
  auto p = gpuinfo::read_proc_stat(static_cast<int>(pid));
  return p && p->start_ticks != start;
}

void remove_orphans(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (lstat(e.path().c_str(), &st) == 0 && st.st_uid == geteuid() && S_ISDIR(st.st_mode) &&
        owner_gone(name.substr(prefix.size())))
      std::filesystem::remove_all(e.path(), ec);
  }
}

}  // namespace

TempDir TempDir::create_owned(const std::string& parent, const std::string& prefix,
                              const std::string& tail, const std::string& what) {
  remove_orphans(parent, prefix);
  return create(parent, fmt::format("{}{}-{}", prefix, owner_tag(), tail), what);
}

TempDir& TempDir::operator=(TempDir&& o) noexcept {
  if (this != &o) {
    TempDir gone(std::move(*this));
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

// remove_all removes links, never what they point to.
TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

LineReader::State LineReader::read_from(int fd, std::vector<std::string>& lines) {
  std::array<char, 65536> tmp;
  ssize_t n = read(fd, tmp.data(), tmp.size());
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return State::open;
  if (n <= 0) return State::closed;
  std::size_t start = buf_.size();
  buf_.append(tmp.data(), static_cast<std::size_t>(n));
  std::size_t from = 0, nl;
  while ((nl = buf_.find('\n', start)) != std::string::npos) {
    lines.emplace_back(buf_, from, nl - from);
    from = start = nl + 1;
  }
  buf_.erase(0, from);
  return buf_.size() > max_line_ ? State::overlong : State::open;
}

std::optional<std::string> read_some(common::Fd& fd) {
  char buf[65536];
  ssize_t n = read(fd.get(), buf, sizeof buf);
  if (n > 0) return std::string(buf, static_cast<std::size_t>(n));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return std::string();
  fd.reset();
  return std::nullopt;
}

std::vector<std::string> env_strings(const Env& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<std::string> program_candidates(const std::string& name, const Env& env) {
  if (name.find('/') != std::string::npos) return {name};
  auto it = env.find("PATH");
  std::string path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  std::vector<std::string> out;
  std::size_t b = 0;
  while (b <= path.size()) {
    std::size_t e = path.find(':', b);
    if (e == std::string::npos) e = path.size();
    std::string dir = path.substr(b, e - b);
    out.push_back((dir.empty() ? "." : dir) + "/" + name);
    b = e + 1;
  }
  return out;
}

int exec_program(const std::vector<std::string>& argv, const Env& env) {
  if (argv.empty() || argv[0].empty()) return ENOENT;
  std::vector<std::string> es = env_strings(env);
  std::vector<char*> ev, av;
  for (auto& s : es) ev.push_back(s.data());
  ev.push_back(nullptr);
  std::vector<std::string> args = argv;
  for (auto& s : args) av.push_back(s.data());
  av.push_back(nullptr);
  // execvpe's rules, with PATH taken from the program's environment rather than ours.
  int result = ENOENT;
  for (std::string& path : program_candidates(argv[0], env)) {
    execve(path.c_str(), av.data(), ev.data());
    if (errno == ENOEXEC) {  // a script without #!: the shell runs it
      std::vector<char*> sh{const_cast<char*>("/bin/sh"), path.data()};
      sh.insert(sh.end(), av.begin() + 1, av.end());
      execve("/bin/sh", sh.data(), ev.data());
    }
    if (errno == EACCES) {
      result = EACCES;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      return errno;
    }
  }
  return result;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string random_token() {
  unsigned char b[16] = {};
  common::Fd fd(open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd || read(fd.get(), b, sizeof b) != static_cast<ssize_t>(sizeof b))
    throw Error("cannot read /dev/urandom for the control token");
  std::string s;
  for (unsigned char c : b) s += fmt::format("{:02x}", c);
  return s;
}

}  // namespace gpurun::launcher::proc

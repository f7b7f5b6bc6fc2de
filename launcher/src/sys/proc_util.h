// proc_util.h: POSIX plumbing shared by the supervisor and the rank wrapper, each piece owning
// what it opens: a self-pipe for signals, a child process, a temporary file, a line reader for
// sockets and pipes, exec with an environment, deadlines for an event loop. Private.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpurun/common/posix.h"
#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/error.h"

namespace gpurun::launcher::proc {

// Signals turned into bytes on a pipe, so an event loop can poll for them. One per process; the
// handlers go back to the default when it goes.
class SignalPipe {
 public:
  explicit SignalPipe(std::vector<int> signals);
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  int fd() const { return read_.get(); }
  std::vector<int> drain();  // the signals that arrived since the last call

 private:
  std::vector<int> signals_;
  common::Fd read_, write_;
};

void restore_default_signals(const std::vector<int>& signals);

// A child process in its own process group. If its owner goes before the child was reaped (an
// error path), the whole group is killed and reaped: no orphan keeps a GPU or a port.
class Child {
 public:
  Child() = default;
  // Forks; in the child runs `in_child` (may be empty), then execs argv with env (PATH searched
  // in env's PATH). Returns once the exec happened; throws ExecError when it failed.
  static Child spawn(const std::vector<std::string>& argv, const Env& env,
                     const std::function<void()>& in_child = {});
  Child(Child&& o) noexcept;
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }
  // The wait status once reaped.
  std::optional<int> status() const { return status_; }
  // Records `status` when `pid` is this child (from a waitpid(-1) loop); true if it was.
  bool reaped(pid_t pid, int status);
  // Reaps without blocking; true once the child has been reaped.
  bool poll_exit();
  void signal(int sig) const;        // the process
  void signal_group(int sig) const;  // its process group
  int wait();                        // blocks until reaped; the wait status

 private:
  void kill_and_reap() noexcept;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// exec failed in Child::spawn (or a check found it would): errno, the program named, and the
// host when it matters ("cannot run 'x' on node2: No such file or directory").
struct ExecError : Error {
  // "cannot run 'PROGRAM' on HOST: why (hint)"; a name without '/' that is nowhere is "not
  // found on PATH".
  ExecError(const std::string& program, int err, const std::string& host = "",
            const std::string& hint = "");
  int err;
};

// The exit code a shell would give: the code, or 128+signal.
int exit_code(int wait_status);

// A file under /tmp removed when its owner goes.
class TempFile {
 public:
  TempFile() = default;
  // `prefix` like "gpurun-hosts-"; the file holds `contents`. Throws Error naming `what`.
  static TempFile create(const std::string& prefix, std::string_view contents,
                         const std::string& what);
  TempFile(TempFile&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempFile& operator=(TempFile&& o) noexcept;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A folder of one's own (mkdtemp: mode 0700, a name no one chose first) removed with all it
// holds when its owner goes.
class TempDir {
 public:
  TempDir() = default;
  // `parent`/`prefix`XXXXXX. Throws Error naming `what`.
  static TempDir create(const std::string& parent, const std::string& prefix,
                        const std::string& what);
  // For a folder its owner may leave behind when killed (SIGKILL runs no destructor):
  // `parent`/`prefix`pPID.START-`tail`XXXXXX, PID and START (in clock ticks) this process's.
  // First removes this user's folders of `prefix` whose owner is gone (no process PID, or one
  // that started at another time: the pid reused).
  static TempDir create_owned(const std::string& parent, const std::string& prefix,
                              const std::string& tail, const std::string& what);
  TempDir(TempDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempDir& operator=(TempDir&& o) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Reads whatever is available from a non-blocking fd and cuts it into lines (without '\n').
class LineReader {
 public:
  enum class State { open, closed, overlong };
  explicit LineReader(std::size_t max_line = 65536) : max_line_(max_line) {}
  // Appends the complete lines read to `lines`. `closed` on EOF or error; `overlong` when a line
  // passes max_line without a newline (a peer that is not one of ours).
  State read_from(int fd, std::vector<std::string>& lines);
  const std::string& pending() const { return buf_; }

 private:
  std::string buf_;
  std::size_t max_line_;
};

// What a non-blocking pipe or socket has now (up to 64 KiB): "" when nothing yet; nullopt at
// end of file or on an error, when `fd` is also closed.
std::optional<std::string> read_some(common::Fd& fd);

// envp for execve built from a map.
std::vector<std::string> env_strings(const Env& env);
// Where argv[0] is looked for: itself when it has a '/', else each directory of env's PATH.
std::vector<std::string> program_candidates(const std::string& name, const Env& env);
// Execs argv with env, searching env's PATH; returns errno when it fails.
int exec_program(const std::vector<std::string>& argv, const Env& env);

double now_seconds();  // monotonic
std::string random_token();

// Named deadlines for an event loop: the earliest one bounds the next wait; due ones fire once.
template <class Key>
class Deadlines {
 public:
  void set(Key k, double at) { at_[k] = at; }
  void clear(Key k) { at_.erase(k); }
  bool armed(Key k) const { return at_.count(k) > 0; }
  // Milliseconds until the earliest deadline (0 if one is due), capped at `cap_ms`.
  int wait_ms(double now, int cap_ms) const {
    double ms = cap_ms;
    for (const auto& [k, t] : at_) ms = std::min(ms, (t - now) * 1000.0 + 1);
    return ms < 0 ? 0 : static_cast<int>(ms);
  }
  // The keys whose deadline has passed, removed.
  std::vector<Key> take_due(double now) {
    std::vector<Key> due;
    for (auto it = at_.begin(); it != at_.end();) {
      if (it->second <= now) {
        due.push_back(it->first);
        it = at_.erase(it);
      } else {
        ++it;
      }
    }
    return due;
  }

 private:
  std::map<Key, double> at_;
};

}  // namespace gpurun::launcher::proc

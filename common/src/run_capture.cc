// run_capture.cc: see run_capture.h.
#include "gpurun/common/run_capture.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "gpurun/common/error.h"
#include "gpurun/common/posix.h"

extern char** environ;

namespace gpurun::common {
namespace {

pid_t spawn_with_pipe(const std::vector<std::string>& argv, int write_end) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, write_end, 1);
  posix_spawn_file_actions_adddup2(&fa, write_end, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigfillset(&defaults);  // the caller may ignore or block signals (a daemon): the tool must not
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw Error("cannot run " + argv[0] + ": " + strerror(rc));
  return pid;
}

}  // namespace

Captured run_capture(const std::vector<std::string>& argv, int timeout_ms, size_t max_bytes,
                     int cancel_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + strerror(errno));
  common::Fd read_end(fds[0]), write_end(fds[1]);
  pid_t pid = spawn_with_pipe(argv, write_end.get());
  write_end.reset();
  Captured out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[8192];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      out.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p[2] = {{read_end.get(), POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    int rc = ::poll(p, cancel_fd >= 0 ? 2 : 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;  // the deadline check above decides
    if (cancel_fd >= 0 && (p[1].revents & POLLIN)) {
      out.cancelled = true;
      ::kill(pid, SIGKILL);
      break;
    }
    ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.output.append(buf, std::min(static_cast<size_t>(n), max_bytes - out.output.size()));
    if (out.output.size() >= max_bytes) {
      ::kill(pid, SIGKILL);  // a tool that floods us is as broken as one that hangs
      break;
    }
  }
  int status = 0;
  pid_t w;
  while ((w = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  // A caller that ignores SIGCHLD (gpuq's daemon) gets ECHILD: the tool is gone, its status lost.
  if (w == pid && WIFEXITED(status) && !out.timed_out && !out.cancelled)
    out.exit_code = WEXITSTATUS(status);
  return out;
}

}  // namespace gpurun::common

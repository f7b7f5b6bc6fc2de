// Test harness for gpuq end-to-end tests: a real `gpuq daemon` on a private temp state dir and
// socket (so parallel ctest runs never collide), shell commands with captured output, and waits
// that are bounded and name what they waited for. Everything is removed on destruction.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gpuq_test {

struct Result {
  int rc = -1;
  std::string out, err;
};

// Runs `/bin/sh -c command` and captures stdout and stderr.
Result sh(const std::string& command);

std::string gpuq_bin();  // the built gpuq executable
std::string read_text(const std::string& path);
std::vector<std::string> lines(const std::string& text);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Daemon {
 public:
  // extra: additional `gpuq daemon` options; gpus "auto": no --gpus (the daemon finds them).
  explicit Daemon(std::vector<std::string> extra = {}, std::string gpus = "0,1,2,3");
  ~Daemon();
  void start();  // waits until it answers
  void kill9();  // SIGKILL, and waits for the process to be gone
  void stop();   // SIGTERM
  const std::string& dir() const { return dir_.path(); }
  std::string socket() const { return dir_.path() + "/gpuq.sock"; }
  // "GPUQ_SOCKET=... /path/to/gpuq"
  std::string cli() const;
  Result gpuq(const std::string& args) const { return sh(cli() + " " + args); }
  // Each `gpuq ARGS` of `cases` ({ARGS, message}) exits non-zero with the message on stderr
  // (gtest expectations, one pair per case).
  void expect_refused(const std::vector<std::pair<std::string, std::string>>& cases) const;
  // Writes an executable script into the work dir and returns its path.
  std::string script(const std::string& name, const std::string& body) const;
  // Asserts success, returns the id; `env` ("K=V ...") is set for gpuq submit (and the job).
  int64_t submit(const std::string& args, const std::string& env = "") const;
  std::string output(int64_t id) const;  // the job's default output file, slurm-ID.out
  nlohmann::json show(int64_t id) const;
  // One raw request on the socket (what any local user may send) and the daemon's reply.
  nlohmann::json request(const std::string& json) const;
  nlohmann::json wait_final(int64_t id, double timeout_s = 30) const;
  // Waits for the job to exist (a background client may not have submitted it yet) and be in
  // `state`.
  nlohmann::json wait_state(int64_t id, const std::string& state, double timeout_s = 30) const;
  std::string log() const { return read_text(dir_.path() + "/daemon.log"); }
  pid_t pid() const { return pid_; }

 private:
  TempDir dir_;
  std::vector<std::string> extra_;
  std::string gpus_;
  pid_t pid_ = -1;
};

// A throwaway Unix user (useradd; needs root), deleted when it goes out of scope.
class TestUser {
 public:
  explicit TestUser(const std::string& prefix);
  ~TestUser();
  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }
  // Runs `/bin/sh -c cmd` as this user (cmd must not hold a single quote).
  Result run(const std::string& cmd) const;

 private:
  std::string name_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// The resident memory of a process now (VmRSS) and at its peak (VmHWM), in MiB; -1 if unknown.
long rss_mib(pid_t pid);
long peak_rss_mib(pid_t pid);

}  // namespace gpuq_test

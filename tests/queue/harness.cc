// gpuq end-to-end test harness (harness.h).
#include "harness.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "gpurun/queue/protocol.h"

extern char** environ;

namespace gpuq_test {

std::string gpuq_bin() {
  return GPUQ_BIN;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

TestUser::TestUser(const std::string& prefix) {
  std::random_device rd;
  name_ = fmt::format("{}{:x}", prefix, rd() & 0xffffff);
  Result r = sh(fmt::format("useradd -M -d /nonexistent -s /bin/sh {}", name_));
  if (r.rc != 0) throw std::runtime_error("useradd failed: " + r.err);
  passwd* pw = getpwnam(name_.c_str());
  if (!pw) throw std::runtime_error("useradd made no passwd entry for " + name_);
  uid_ = pw->pw_uid;
  gid_ = pw->pw_gid;
}

TestUser::~TestUser() {
  sh(fmt::format("pkill -KILL -u {} 2>/dev/null; userdel {} 2>/dev/null", uid_, name_));
}

Result TestUser::run(const std::string& cmd) const {
  return sh(fmt::format("runuser -u {} -- /bin/sh -c '{}'", name_, cmd));
}

namespace {
long status_kib(pid_t pid, const char* field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return std::stol(line.substr(prefix.size()));
  return -1;
}
}  // namespace

long rss_mib(pid_t pid) {
  const long k = status_kib(pid, "VmRSS");
  return k < 0 ? -1 : k / 1024;
}

long peak_rss_mib(pid_t pid) {
  const long k = status_kib(pid, "VmHWM");
  return k < 0 ? -1 : k / 1024;
}

Result sh(const std::string& command) {
  char out_tpl[] = "/tmp/gpuq-test-out-XXXXXX";
  char err_tpl[] = "/tmp/gpuq-test-err-XXXXXX";
  int out_fd = mkstemp(out_tpl), err_fd = mkstemp(err_tpl);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    execl("/bin/sh", "sh", "-c", command.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(out_fd);
  close(err_fd);
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out_tpl);
  r.err = read_text(err_tpl);
  unlink(out_tpl);
  unlink(err_tpl);
  return r;
}

TempDir::TempDir() {
  char tpl[] = "/tmp/gpuq-test-XXXXXX";
  if (!mkdtemp(tpl)) throw std::runtime_error("mkdtemp failed");
  path_ = tpl;
  chmod(path_.c_str(), 0755);  // other test users must reach the socket and their work dirs
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Daemon::Daemon(std::vector<std::string> extra, std::string gpus)
    : extra_(std::move(extra)), gpus_(std::move(gpus)) {
  start();
}

Daemon::~Daemon() {
  if (pid_ > 0) {
    kill9();
  }
  // Jobs outlive the daemon by design; the test's must not outlive the test. Kill each
  // supervisor and its job's process group by the ids in their status files.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/state/run", ec)) {
    if (e.path().extension() != ".status") continue;
    try {
      auto st = nlohmann::json::parse(read_text(e.path().string()));
      if (st.value("phase", "") == "done") continue;
      int pgid = st.value("pgid", 0), sup = st.value("supervisor_pid", 0);
      if (pgid > 0) ::kill(-pgid, SIGKILL);
      if (sup > 0) ::kill(sup, SIGKILL);
    } catch (const std::exception&) {
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

std::string Daemon::cli() const {
  return fmt::format("GPUQ_SOCKET={} {}", socket(), gpuq_bin());
}

void Daemon::start() {
  std::vector<std::string> args = {gpuq_bin(), "daemon", "--state-dir", dir_.path() + "/state",
                                   "--socket", socket()};
  if (gpus_ != "auto") args.insert(args.end(), {"--gpus", gpus_});
  args.insert(args.end(), extra_.begin(), extra_.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  std::string log = dir_.path() + "/daemon.log";
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawn(&pid_, args[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot spawn gpuq daemon");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (gpuq("queue --noheader").rc == 0) return;
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("gpuq daemon exited at start: " + read_text(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("timed out waiting 20 s for the gpuq daemon to answer: " +
                           read_text(log));
}

void Daemon::kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int st;
  waitpid(pid_, &st, 0);
  pid_ = -1;
}

void Daemon::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int st;
  waitpid(pid_, &st, 0);
  pid_ = -1;
}

std::string Daemon::script(const std::string& name, const std::string& body) const {
  std::string path = dir_.path() + "/" + name;
  std::ofstream(path) << body;
  chmod(path.c_str(), 0755);
  return path;
}

int64_t Daemon::submit(const std::string& args, const std::string& env) const {
  Result r = sh(fmt::format("cd {0} && LOG={0}/intervals.log {3} {1} submit {2}", dir_.path(),
                            cli(), args, env));
  const std::string prefix = "Submitted batch job ";
  if (r.rc != 0 || r.out.rfind(prefix, 0) != 0)
    throw std::runtime_error(
        fmt::format("gpuq submit {} failed (rc {}): {} {}", args, r.rc, r.out, r.err));
  return std::stoll(r.out.substr(prefix.size()));
}

void Daemon::expect_refused(
    const std::vector<std::pair<std::string, std::string>>& cases) const {
  for (const auto& [args, want] : cases) {
    Result r = gpuq(args);
    EXPECT_NE(r.rc, 0) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
  }
}

nlohmann::json Daemon::show(int64_t id) const {
  Result r = gpuq(fmt::format("show --json {}", id));
  if (r.rc != 0) throw std::runtime_error(fmt::format("gpuq show {} failed: {}", id, r.err));
  return nlohmann::json::parse(r.out).at(0);
}

std::string Daemon::output(int64_t id) const {
  return read_text(fmt::format("{}/slurm-{}.out", dir_.path(), id));
}

nlohmann::json Daemon::wait_state(int64_t id, const std::string& state, double timeout_s) const {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  nlohmann::json j;
  while (std::chrono::steady_clock::now() < deadline) {
    // A job a background client submits may not exist yet: "invalid job id" until it does.
    Result r = gpuq(fmt::format("show --json {}", id));
    if (r.rc != 0 && r.err.find("invalid job id") == std::string::npos)
      throw std::runtime_error(fmt::format("gpuq show {} failed: {}", id, r.err));
    if (r.rc == 0) j = nlohmann::json::parse(r.out).at(0);
    if (r.rc == 0 && j["state"] == state) return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error(fmt::format("job {} did not reach {} within {} s (last: {})", id, state,
                                       timeout_s, j.dump()));
}

nlohmann::json Daemon::wait_final(int64_t id, double timeout_s) const {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  nlohmann::json j;
  while (std::chrono::steady_clock::now() < deadline) {
    j = show(id);
    if (j["state"] != "PENDING" && j["state"] != "RUNNING") return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error(
      fmt::format("job {} did not finish within {} s (last: {})", id, timeout_s, j.dump()));
}

nlohmann::json Daemon::request(const std::string& json) const {
  gpurun::queue::Fd fd = gpurun::queue::connect_unix(socket());
  gpurun::queue::write_all(fd.get(), gpurun::queue::frame(json));
  return nlohmann::json::parse(gpurun::queue::read_frame(fd.get(), gpurun::queue::kMaxReplyBytes));
}

}  // namespace gpuq_test

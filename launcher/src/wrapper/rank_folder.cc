// rank_folder.cc: see rank_folder.h.
#include "wrapper/rank_folder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gpurun/common/posix.h"
#include "gpurun/launcher/error.h"
#include "gpurun/gpuinfo/proc_usage.h"
#include "stacks/stacks.h"

namespace gpurun::launcher {

std::optional<std::int64_t> parse_heartbeat(std::string_view s) {
  // Lenient about padding on either side: a right-aligned fixed-width field is a fair reading.
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  std::size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  for (std::size_t i = digits; i < s.size(); ++i)
    if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t' && s[i] != '\0')
      return std::nullopt;
  std::int64_t v = 0;
  std::from_chars(s.data(), s.data() + digits, v);
  return v;
}

namespace {

// This process's start time (proc_usage.h): with the pid in a folder's name, it tells a live
// owner from a dead one whose pid was reused.
std::int64_t own_start_ticks() {
  auto me = gpuinfo::read_proc_stat(static_cast<int>(getpid()));
  return me ? me->start_ticks : 0;
}

// Whether the wrapper that named a folder "...pPID.START-rank..." is gone: no process PID, or
// one that started at another time (its pid reused). A name without ".START" (an older gpurun)
// counts as gone only when no process has the pid.
bool owner_gone(const std::string& after_prefix) {
  char* end = nullptr;
  const long pid = std::strtol(after_prefix.c_str(), &end, 10);
  if (pid <= 0 || end == after_prefix.c_str()) return false;
  if (*end != '.') return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  const long long start = std::strtoll(end + 1, nullptr, 10);
  auto p = gpuinfo::read_proc_stat(static_cast<int>(pid));
  return !p || p->start_ticks != start;
}

// Folders of wrappers that died without cleaning up (an engine that SIGKILLs its tasks while it
// aborts, as mpirun does; a wrapper killed by hand): named with their host, pid and start time,
// removed by the next wrapper there once their owner is gone. Only this user's folders.
void remove_stale(const std::string& tmpdir, const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(tmpdir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (lstat(e.path().c_str(), &st) == 0 && st.st_uid == geteuid() && S_ISDIR(st.st_mode) &&
        owner_gone(name.substr(prefix.size())))
      std::filesystem::remove_all(e.path(), ec);
  }
}

}  // namespace

RankDir RankDir::create(const std::string& tmpdir, int rank) {
  std::string prefix = fmt::format("gpurun-{}-p", common::hostname());
  remove_stale(tmpdir, prefix);
  RankDir d;
  try {  // owned from here: removed on the errors below too
    d.dir_ = proc::TempDir::create(
        tmpdir, fmt::format("{}{}.{}-rank{}-", prefix, getpid(), own_start_ticks(), rank),
        fmt::format("rank {}'s folder", rank));
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (set TMPDIR?)");
  }
  // The rank's alone: mkdtemp made the folder 0700.
  common::Fd hb(open(d.heartbeat().c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  if (!hb || mkdir(d.python_dir().c_str(), 0700) != 0 || mkdir(d.pystack_dir().c_str(), 0700) != 0)
    throw Error(fmt::format("rank {}: cannot populate {}: {}", rank, d.path(), strerror(errno)));
  common::Fd py(open((d.python_dir() + "/sitecustomize.py").c_str(),
                     O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600));
  if (!py || !common::write_all(py.get(), stacks::python_shim()))
    throw Error(fmt::format("rank {}: cannot write {}/sitecustomize.py: {}", rank, d.python_dir(),
                            strerror(errno)));
  return d;
}

std::optional<std::int64_t> RankDir::read_step() const {
  common::Fd fd(open(heartbeat().c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  char buf[64];
  ssize_t n = pread(fd.get(), buf, sizeof buf, 0);
  if (n <= 0) return std::nullopt;
  return parse_heartbeat(std::string_view(buf, static_cast<std::size_t>(n)));
}

}  // namespace gpurun::launcher

// Run-directory files shared by daemon and supervisor (runfiles.h).
#include "runfiles.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "gpurun/launcher/proc_usage.h"
#include "gpurun/queue/protocol.h"

namespace gpurun::queue {

RunPaths run_paths(const std::string& run_dir, int64_t id) {
  return {fmt::format("{}/{}.spec", run_dir, id), fmt::format("{}/{}.lock", run_dir, id),
          fmt::format("{}/{}.status", run_dir, id)};
}

void write_file_atomic(const std::string& path, const std::string& content, bool durable) {
  std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) throw std::runtime_error(fmt::format("cannot create {}: {}", tmp, strerror(errno)));
  size_t off = 0;
  while (off < content.size()) {
    ssize_t w = ::write(fd.get(), content.data() + off, content.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("cannot write {}: {}", tmp, strerror(errno)));
    }
    off += static_cast<size_t>(w);
  }
  if (durable && ::fsync(fd.get()) != 0)
    throw std::runtime_error(fmt::format("fsync {}: {}", tmp, strerror(errno)));
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error(fmt::format("rename {} -> {}: {}", tmp, path, strerror(errno)));
  if (durable) {
    std::string dir = path.substr(0, path.find_last_of('/'));
    Fd d(::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (d) ::fsync(d.get());
  }
}

nlohmann::json status_to_json(const SupervisorStatus& s) {
  return {{"phase", s.phase},
          {"supervisor_pid", s.supervisor_pid},
          {"pgid", s.pgid},
          {"exit_code", s.exit_code},
          {"exit_signal", s.exit_signal},
          {"timed_out", s.timed_out},
          {"cancelled", s.cancelled},
          {"end_ms", s.end_ms},
          {"reason", s.reason},
          {"cpu_seconds", s.cpu_seconds},
          {"max_rss_kb", s.max_rss_kb}};
}

std::optional<SupervisorStatus> read_status(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  try {
    auto o = nlohmann::json::parse(*text);
    SupervisorStatus s;
    s.phase = o.at("phase").get<std::string>();
    s.supervisor_pid = o.value("supervisor_pid", 0);
    s.pgid = o.value("pgid", 0);
    s.exit_code = o.value("exit_code", 0);
    s.exit_signal = o.value("exit_signal", 0);
    s.timed_out = o.value("timed_out", false);
    s.cancelled = o.value("cancelled", false);
    s.end_ms = o.value("end_ms", int64_t{0});
    s.reason = o.value("reason", "");
    s.cpu_seconds = o.value("cpu_seconds", 0.0);
    s.max_rss_kb = o.value("max_rss_kb", int64_t{0});
    return s;
  } catch (const std::exception&) {
    return std::nullopt;  // torn writes cannot happen (rename), but never trust a file blindly
  }
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::vector<int> find_job_processes(int sid, int pgid, int ppid) {
  std::vector<int> out;
  const int self = getpid();
  for (const auto& p : launcher::scan_processes()) {
    if (p.pid == self || p.state == 'Z')
      continue;  // a zombie holds nothing; its reaper may be slow
    if ((sid && p.sid == sid) || (pgid && p.pgid == pgid) || (ppid && p.ppid == ppid))
      out.push_back(p.pid);
  }
  return out;
}

}  // namespace gpurun::queue

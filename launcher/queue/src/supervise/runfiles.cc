// Run-directory files shared by daemon and supervisor (runfiles.h).
#include "supervise/runfiles.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "gpurun/gpuinfo/proc_usage.h"
#include "gpurun/queue/protocol.h"

namespace gpurun::queue {

RunPaths run_paths(const std::string& run_dir, int64_t id) {
  return {fmt::format("{}/{}.spec", run_dir, id), fmt::format("{}/{}.lock", run_dir, id),
          fmt::format("{}/{}.status", run_dir, id)};
}

nlohmann::json status_to_json(const SupervisorStatus& s) {
  return {{"phase", s.phase},
          {"supervisor_pid", s.supervisor_pid},
          {"pgid", s.pgid},
          {"supervisor_start", s.supervisor_start},
          {"pgid_start", s.pgid_start},
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
    s.supervisor_start = o.value("supervisor_start", uint64_t{0});
    s.pgid_start = o.value("pgid_start", uint64_t{0});
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

namespace {

std::optional<gpuinfo::ProcStat> proc_stat(int pid) {
  auto text = read_file(fmt::format("/proc/{}/stat", pid));
  if (!text) return std::nullopt;
  return gpuinfo::parse_proc_stat(*text, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE));
}

// `id` if it still names the job's session or group, else 0 (see JobProcesses).
int still_ours(int id, uint64_t start) {
  if (id <= 0) return 0;
  auto holder = common::process_start_time(id);
  if (!holder) return id;  // nobody has the pid: it is still the job's while any member lives
  return start != 0 && *holder == start ? id : 0;
}

bool is_member(const gpuinfo::ProcStat& p, const JobProcesses& job) {
  const int sid = still_ours(job.sid, job.sid_start);
  const int pgid = still_ours(job.pgid, job.pgid_start);
  return (sid && p.sid == sid) || (pgid && p.pgid == pgid) || (job.ppid && p.ppid == job.ppid);
}

}  // namespace

size_t kill_job_processes(const JobProcesses& job) {
  size_t found = 0;
  const int self = getpid();
  for (const auto& p : gpuinfo::scan_processes()) {
    if (p.pid == self || p.state == 'Z' || !is_member(p, job)) continue;
    // The pidfd pins the process we check next: if the pid was reused in between, the fresh
    // /proc read shows the new process (not a member) or the signal finds the old one gone.
    Fd pidfd(static_cast<int>(syscall(SYS_pidfd_open, p.pid, 0)));
    if (!pidfd) continue;
    auto now = proc_stat(p.pid);
    if (!now || now->start_ticks != p.start_ticks || !is_member(*now, job)) continue;
    ++found;
    syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
  }
  return found;
}

}  // namespace gpurun::queue

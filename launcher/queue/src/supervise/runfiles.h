// Files shared by the gpuq daemon and its per-job supervisors, under STATE/run/:
//   N.spec    what to run (SupervisorSpec, supervisor_spec.h: written by the daemon before it
//             starts the supervisor)
//   N.lock    flock held by the daemon, then by the supervisor for its whole life: a restarted
//             daemon that can take the lock knows the supervisor is gone
//   N.status  the supervisor's report: "running" (with its pid and the job's process group) and
//             then "done" (with the exit status), each written whole (common::write_file_atomic), so a
//             daemon that was down when the job ended still learns how it ended.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gpurun/common/posix.h"

namespace gpurun::queue {

struct RunPaths {
  std::string spec, lock, status;
};
RunPaths run_paths(const std::string& run_dir, int64_t job_id);

using common::read_file;  // nullopt when missing

struct SupervisorStatus {
  std::string phase;       // "running" or "done"
  int supervisor_pid = 0;  // the job's session id
  int pgid = 0;            // the job's process group id (its batch shell's pid)
  // Their start times (clock ticks since boot, /proc/PID/stat): with them a pid that the kernel
  // has since given to another process is told apart from the job's (0: not recorded).
  uint64_t supervisor_start = 0, pgid_start = 0;
  int exit_code = 0;
  int exit_signal = 0;
  bool timed_out = false;
  bool cancelled = false;
  int64_t end_ms = 0;
  std::string reason;  // why the job could not start (chdir, output file, exec), if so
  // The job's processes as getrusage(RUSAGE_CHILDREN) saw them once all were reaped (the
  // supervisor is their subreaper): exact, where the daemon's samples miss short-lived ones.
  double cpu_seconds = 0;
  int64_t max_rss_kb = 0;  // the largest single process
};
nlohmann::json status_to_json(const SupervisorStatus& s);
std::optional<SupervisorStatus> read_status(
    const std::string& path);  // nullopt: missing/unreadable

int64_t now_ms();

}  // namespace gpurun::queue

namespace gpurun::queue {

// A job's processes: its session, its process group and (for the supervisor) its children. A
// session or group id is used only while it is still the job's: the kernel does not hand out a
// pid that a live process has as its session or group id, so a pid now held by a process that
// started at another time than the one recorded means the job's session or group is gone and
// the number names someone else's (the bystander a daemon restart must not kill).
struct JobProcesses {
  int sid = 0, pgid = 0, ppid = 0;         // 0 matches nothing
  uint64_t sid_start = 0, pgid_start = 0;  // 0: unknown, the id is used only if no process has it
};

// SIGKILLs every live process of the job once, each through a pidfd opened before its /proc
// entry is checked, so a pid reused meanwhile is never signalled. Returns how many it found.
size_t kill_job_processes(const JobProcesses& job);

}  // namespace gpurun::queue

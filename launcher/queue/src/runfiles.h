// Files shared by the gpuq daemon and its per-job supervisors, under STATE/run/:
//   N.spec    what to run (written by the daemon before it forks the supervisor)
//   N.lock    flock held by the daemon, then by the supervisor for its whole life: a restarted
//             daemon that can take the lock knows the supervisor is gone
//   N.status  the supervisor's report: "running" (with its pid and the job's process group) and
//             then "done" (with the exit status), written to a temp name and renamed, the final one
//             fsynced, so a daemon that was down when the job ended still learns how it ended.
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

// Writes `content` to path via path.tmp + rename; fsyncs file and directory when `durable`.
void write_file_atomic(const std::string& path, const std::string& content, bool durable);
using common::read_file;  // nullopt when missing

struct SupervisorStatus {
  std::string phase;  // "running" or "done"
  int supervisor_pid = 0;
  int pgid = 0;
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
// Live (non-zombie) pids other than the caller's whose session is `sid`, process group is `pgid` or
// parent is `ppid` (a 0 argument matches nothing), from /proc. Used to find every process of a job.
std::vector<int> find_job_processes(int sid, int pgid, int ppid);
}  // namespace gpurun::queue

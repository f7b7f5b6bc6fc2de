// proc_usage.h: CPU time and memory of a job's processes, from /proc (one /proc/PID/stat per
// process), or from the job's cgroup (cgroup v2 cpu.stat and memory.peak) when it has one of its
// own. The parsers take file contents, so they are tested without the processes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpurun::gpuinfo {

// One line of /proc/PID/stat, the fields the queue and the sampler use.
struct ProcStat {
  int pid = 0;
  char state = '?';
  int ppid = 0, pgid = 0, sid = 0;
  double cpu_seconds = 0;           // utime + stime
  double children_cpu_seconds = 0;  // cutime + cstime: children it has waited for
  int64_t rss_bytes = 0;
  // starttime (field 22): clock ticks from boot to the process's start. With the pid it names
  // one process for good: a pid the kernel reused has another start time.
  int64_t start_ticks = 0;
};

// Parses /proc/PID/stat (comm may hold spaces and parentheses); nullopt when malformed.
std::optional<ProcStat> parse_proc_stat(std::string_view text, long clock_ticks, long page_size);

// /proc/PID/stat of one process, parsed; nullopt when it is gone.
std::optional<ProcStat> read_proc_stat(int pid);

// Every process in proc_root ("/proc"), in one pass. Processes that exit meanwhile are skipped.
std::vector<ProcStat> scan_processes(const std::string& proc_root = "/proc");

struct ProcessUsage {
  double cpu_seconds = 0;      // user + system, including the children its processes waited for
  int64_t rss_bytes = 0;       // resident memory now (sum over the processes)
  int64_t peak_rss_bytes = 0;  // the cgroup's peak; for /proc, the same as rss_bytes
  int processes = 0;
  std::string source;  // "proc" or "cgroup"
};

// The processes of one session (a gpuq job's supervisor is its session leader; everything the job
// starts stays in the session unless it calls setsid). Children a process has reaped are counted
// through its cutime/cstime, so the sum only grows while the session lives.
ProcessUsage session_usage(const std::vector<ProcStat>& procs, int sid);

// cgroup v2 files of one cgroup directory: cpu.stat (usage_usec), memory.current and
// memory.peak (kernel >= 5.19; absent before). nullopt when cpu.stat is unreadable.
std::optional<ProcessUsage> cgroup_usage(
    const std::string& dir,
    const std::function<std::optional<std::string>(const std::string&)>& read_file);

// The cgroup v2 directory of a process ("0::/a/b" in /proc/PID/cgroup -> "/sys/fs/cgroup/a/b"),
// or nullopt (no cgroup v2, process gone).
std::optional<std::string> process_cgroup(int pid);

}  // namespace gpurun::gpuinfo

// proc_usage.cc: see proc_usage.h. Figures from proc(5) (/proc/PID/stat fields 14-17 and 24) and
// the kernel's cgroup v2 documentation (cpu.stat usage_usec, memory.current, memory.peak).
#include "gpurun/gpuinfo/proc_usage.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "gpurun/common/posix.h"

namespace gpurun::gpuinfo {

std::optional<ProcStat> parse_proc_stat(std::string_view text, long clock_ticks, long page_size) {
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return std::nullopt;
  ProcStat p;
  p.pid = std::atoi(std::string(text.substr(0, open)).c_str());
  // After "(comm)": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  // utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss; v[k] is
  // field k+4 of proc(5).
  std::string rest(text.substr(close + 1));
  const char* c = rest.c_str();
  while (*c == ' ') ++c;
  if (!*c) return std::nullopt;
  p.state = *c++;
  long long v[21];
  for (long long& x : v) {
    char* end = nullptr;
    x = std::strtoll(c, &end, 10);
    if (end == c) return std::nullopt;
    c = end;
  }
  if (p.pid <= 0) return std::nullopt;
  p.ppid = static_cast<int>(v[0]);
  p.pgid = static_cast<int>(v[1]);
  p.sid = static_cast<int>(v[2]);
  double tick = clock_ticks > 0 ? 1.0 / clock_ticks : 0.01;
  p.cpu_seconds = static_cast<double>(v[10] + v[11]) * tick;
  p.children_cpu_seconds = static_cast<double>(v[12] + v[13]) * tick;
  p.rss_bytes = v[20] * page_size;
  p.start_ticks = v[18];
  return p;
}

std::optional<ProcStat> read_proc_stat(int pid) {
  auto text = common::read_file(fmt::format("/proc/{}/stat", pid));
  if (!text) return std::nullopt;
  return parse_proc_stat(*text, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE));
}

std::vector<ProcStat> scan_processes(const std::string& proc_root) {
  std::vector<ProcStat> out;
  const long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  for (const std::string& name : common::list_dir(proc_root).value_or(std::vector<std::string>{})) {
    if (name[0] < '1' || name[0] > '9') continue;
    auto text = common::read_file(proc_root + "/" + name + "/stat");
    if (!text) continue;  // exited since the listing
    if (auto p = parse_proc_stat(*text, ticks, page)) out.push_back(*p);
  }
  return out;
}

ProcessUsage session_usage(const std::vector<ProcStat>& procs, int sid) {
  ProcessUsage u;
  u.source = "proc";
  for (const auto& p : procs) {
    if (p.sid != sid) continue;
    u.cpu_seconds += p.cpu_seconds + p.children_cpu_seconds;
    u.rss_bytes += p.rss_bytes;
    u.processes += 1;
  }
  u.peak_rss_bytes = u.rss_bytes;
  return u;
}

std::optional<ProcessUsage> cgroup_usage(
    const std::string& dir,
    const std::function<std::optional<std::string>(const std::string&)>& read_file) {
  auto cpu = read_file(dir + "/cpu.stat");
  if (!cpu) return std::nullopt;
  ProcessUsage u;
  u.source = "cgroup";
  std::istringstream in(*cpu);
  std::string key;
  long long value = 0;
  bool found = false;
  while (in >> key >> value)
    if (key == "usage_usec") {
      u.cpu_seconds = value / 1e6;
      found = true;
    }
  if (!found) return std::nullopt;
  auto number = [&](const char* name) -> int64_t {
    auto t = read_file(dir + "/" + name);
    return t ? std::atoll(t->c_str()) : 0;
  };
  u.rss_bytes = number("memory.current");
  u.peak_rss_bytes = std::max(number("memory.peak"), u.rss_bytes);
  if (auto procs = read_file(dir + "/cgroup.procs"))
    for (char c : *procs) u.processes += c == '\n';
  return u;
}

std::optional<std::string> process_cgroup(int pid) {
  auto text = common::read_file(fmt::format("/proc/{}/cgroup", pid));
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return std::nullopt;
}

}  // namespace gpurun::gpuinfo

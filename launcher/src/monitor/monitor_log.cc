// monitor_log.cc: the supervisor's side of --monitor (monitor.h): FILE.csv, and the summary with
// its likely stragglers.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <tuple>

#include "monitor/monitor.h"

namespace gpurun::launcher::monitor {
namespace {

// The one refusal of FILE.csv, for errno: the same words from a launch and from --dry-run.
Error unwritable(const std::string& path) {
  return Error(fmt::format("--monitor {}: cannot write it: {}", path, strerror(errno)));
}

// ISO 8601 in UTC with milliseconds: samples can be a fraction of a second apart.
std::string utc_ms(int64_t ms) {
  time_t t = static_cast<time_t>(ms / 1000);
  tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ms % 1000));
}

std::string cell(const std::optional<double>& v) {
  return v ? fmt::format("{}", *v) : std::string();
}

std::string gpu_name(int index, int mig) {
  return mig < 0 ? std::to_string(index) : fmt::format("{}-mig{}", index, mig);
}

// "0,1,-1" -> {0, 1, -1}; "-" -> {}. Throws Error for anything else.
std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> out;
  if (text == "-") return out;
  std::string_view v = text;
  while (true) {
    std::size_t comma = v.find(',');
    std::string_view w = v.substr(0, comma);
    int r = 0;
    auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), r);
    if (w.empty() || ec != std::errc() || p != w.data() + w.size())
      throw Error(fmt::format("GPU sample: ranks '{}' is not a list of rank numbers", text));
    out.push_back(r);
    if (comma == std::string_view::npos) return out;
    v.remove_prefix(comma + 1);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string describe(const GpuStats& g) {
  std::string who = g.rank >= 0 ? fmt::format(" (rank {})", g.rank) : "";
  std::string util =
      g.util_n ? fmt::format("util mean {:.0f}% max {:.0f}%", g.util_sum / g.util_n, g.util_max)
               : "util n/a";
  std::string mem = g.mem_n ? fmt::format("mem mean {:.0f} MiB", g.mem_sum / g.mem_n) : "mem n/a";
  return fmt::format("GPU {}{} {}, {}", gpu_name(g.index, g.mig), who, util, mem);
}

}  // namespace

std::vector<std::string> summarize(const std::vector<GpuStats>& gpus,
                                   const std::vector<std::string>& node_order) {
  std::vector<std::string> lines, nodes;
  for (const auto& n : node_order)
    if (std::any_of(gpus.begin(), gpus.end(), [&](const GpuStats& g) { return g.node == n; }))
      nodes.push_back(n);
  for (const auto& g : gpus)
    if (std::find(nodes.begin(), nodes.end(), g.node) == nodes.end()) nodes.push_back(g.node);
  for (const auto& n : nodes) {
    std::vector<const GpuStats*> mine;
    for (const auto& g : gpus)
      if (g.node == n) mine.push_back(&g);
    std::sort(mine.begin(), mine.end(), [](const GpuStats* a, const GpuStats* b) {
      return std::tie(a->index, a->mig) < std::tie(b->index, b->mig);
    });
    std::string line = n + ":";
    for (std::size_t i = 0; i < mine.size(); ++i) line += (i ? "; " : " ") + describe(*mine[i]);
    lines.push_back(line);
  }
  std::vector<double> means;
  for (const auto& g : gpus)
    if (g.util_n) means.push_back(g.util_sum / g.util_n);
  if (means.size() < 2) return lines;
  double med = median(means);
  for (const auto& g : gpus) {
    if (!g.util_n || g.util_sum / g.util_n >= med / 2) continue;
    lines.push_back(fmt::format(
        "likely straggler: {} GPU {}{}: mean utilisation {:.0f}% is under half the job's median "
        "({:.0f}%)",
        g.node, gpu_name(g.index, g.mig), g.rank >= 0 ? fmt::format(" (rank {})", g.rank) : "",
        g.util_sum / g.util_n, med));
  }
  return lines;
}

MonitorLog::MonitorLog(const std::string& path) : path_(path) {
  // The user's alone, as the ranks' logs (a file that exists keeps its mode).
  fd_.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!fd_ || !common::write_all(fd_.get(), std::string(kHeader) + "\n")) throw unwritable(path);
}

void MonitorLog::check(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      errno = EISDIR;
    else if (::access(path.c_str(), W_OK) == 0)
      return;
  } else if (errno == ENOENT) {
    std::size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
    if (::access(dir.c_str(), W_OK | X_OK) == 0) return;
  }
  throw unwritable(path);
}

std::vector<std::string> MonitorLog::add(const std::string& node, const control::GpuSamples& m) {
  gpuinfo::GpuSnapshot s = gpuinfo::decode_snapshot(m.snapshot.value);
  std::vector<int> ranks = parse_ranks(m.ranks);
  std::string rows, time = utc_ms(s.time_ms);
  for (std::size_t i = 0; i < s.gpus.size(); ++i) {
    const gpuinfo::GpuSample& g = s.gpus[i];
    int rank = i < ranks.size() ? ranks[i] : -1;
    rows +=
        fmt::format("{},{},{},{},{},{},{},{}\n", time, node, rank >= 0 ? std::to_string(rank) : "",
                    gpu_name(g.index, g.mig), cell(g.util_percent), cell(g.mem_used_mib),
                    cell(g.power_w), cell(g.temp_c));
    auto it = std::find_if(gpus_.begin(), gpus_.end(), [&](const GpuStats& x) {
      return x.node == node && x.index == g.index && x.mig == g.mig;
    });
    if (it == gpus_.end()) it = gpus_.insert(gpus_.end(), GpuStats{node, g.index, g.mig, rank});
    ++it->samples;
    if (g.util_percent) {
      ++it->util_n;
      it->util_sum += *g.util_percent;
      it->util_max = std::max(it->util_max, *g.util_percent);
    }
    if (g.mem_used_mib) {
      ++it->mem_n;
      it->mem_sum += *g.mem_used_mib;
    }
  }
  rows_ += static_cast<int>(s.gpus.size());
  if (!rows.empty() && !common::write_all(fd_.get(), rows)) throw unwritable(path_);
  return std::move(s.problems);
}

}  // namespace gpurun::launcher::monitor

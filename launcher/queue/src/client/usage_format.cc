// Text of gpuq's usage commands (usage_format.h).
#include "gpurun/queue/usage_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>
#include <stdexcept>

#include "gpurun/common/terminal.h"
#include "gpurun/queue/format.h"

namespace gpurun::queue {
namespace {

std::optional<double> opt(const nlohmann::json& v) {
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

std::string percent(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}%", *v) : "-";
}

struct GpuFigures {
  double util_sum = 0, util_max = 0, mem_max = 0, mem_total = 0;
  int64_t util_n = 0, n = 0;
};

// Per-GPU figures from the samples still kept.
std::map<int, GpuFigures> per_gpu(const nlohmann::json& samples) {
  std::map<int, GpuFigures> out;
  for (const auto& s : samples) {
    GpuFigures& f = out[s[1].get<int>()];
    f.n += 1;
    if (auto u = opt(s[2])) f.util_sum += *u, f.util_n += 1, f.util_max = std::max(f.util_max, *u);
    if (auto m = opt(s[3])) f.mem_max = std::max(f.mem_max, *m);
    if (auto t = opt(s[4])) f.mem_total = std::max(f.mem_total, *t);
  }
  return out;
}

std::string gpu_lines(const nlohmann::json& reply) {
  const auto& j = reply["job"];
  const auto& u = j["usage"];
  const int64_t n = u.value("util_samples", int64_t{0});
  if (n == 0)
    return fmt::format(
        "GPU Utilization: no samples (sampling {}, or the job ran less than one sample "
        "interval)\n",
        reply.value("sample_interval_s", 0) > 0
            ? fmt::format("every {} s", reply.value("sample_interval_s", 0))
            : "off");
  std::string out = fmt::format("GPU Utilization: mean {}, max {:.1f}% ({} GPU samples)\n",
                                percent(opt(j["util_mean"])), u.value("util_max", 0.0), n);
  out += fmt::format("GPU Memory Utilized: max {:.0f} MiB (on one GPU)\n",
                     u.value("mem_max_mib", 0.0));
  for (const auto& [gpu, f] : per_gpu(reply["samples"]))
    out += fmt::format(
        "  GPU {}: mean {}, max {:.1f}%, memory max {:.0f} of {:.0f} MiB ({} samples)\n", gpu,
        percent(f.util_n ? std::optional<double>(f.util_sum / f.util_n) : std::nullopt), f.util_max,
        f.mem_max, f.mem_total, f.n);
  if (reply["samples"].empty())
    out += fmt::format("  (per-GPU samples expired: they are kept {:.0f} days)\n",
                       reply.value("sample_retention_s", 0) / 86400.0);
  return out;
}

// seff's line, from the exact run time (whole seconds would overstate a short job's efficiency
// and show it "of 00:00:00"). gpuq does not confine a job to its -c cores, so one that used more
// is over 100%: said as such, with the -c that would have fit.
std::string cpu_efficiency_line(const nlohmann::json& j, int64_t now_ms, double cpu_s, int cpus) {
  const int64_t start = j.value("start_ms", int64_t{0}), end = j.value("end_ms", int64_t{0});
  const double wall = start ? static_cast<double>((end ? end : now_ms) - start) / 1000.0 : 0;
  if (wall <= 0) return "";
  const double core_wall = wall * cpus;
  const std::string of = core_wall < 60 ? fmt::format("{:.2f} s", core_wall)
                                        : sacct_elapsed(static_cast<int64_t>(core_wall + 0.5));
  const double pct = 100.0 * cpu_s / core_wall;
  std::string out = fmt::format("CPU Efficiency: {:.2f}% of {} core-walltime ({} core{})", pct, of,
                                cpus, cpus == 1 ? "" : "s");
  if (pct > 100.5)
    out += fmt::format(": the job used about {:.1f} cores; ask for them with -c {}", cpu_s / wall,
                       static_cast<int>(std::ceil(cpu_s / wall - 0.05)));
  return out + "\n";
}

}  // namespace

std::string utc_time(int64_t ms) {
  time_t t = static_cast<time_t>(ms / 1000);
  tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string format_stats(const nlohmann::json& reply) {
  const auto& j = reply.at("job");
  const auto& u = j["usage"];
  const int64_t elapsed = j.value("elapsed_s", int64_t{0});
  const int cpus = std::max(1, j.value("cpus", 1));
  const double cpu_s = u.value("cpu_seconds", 0.0);
  std::string account = j.value("account", std::string());
  using common::escape_control;
  std::string out = fmt::format("Job ID: {}\nJob Name: {}\nUser: {}\nAccount: {}\n",
                                escape_control(j["display_id"].get<std::string>()),
                                escape_control(j["name"].get<std::string>()),
                                escape_control(j["user"].get<std::string>()),
                                account.empty() ? "(none)" : escape_control(account));
  std::string state = j["state"].get<std::string>();
  if (state != "PENDING" && state != "RUNNING")
    state += fmt::format(" (exit code {})",
                         exit_code_text(j.value("exit_code", 0), j.value("exit_signal", 0)));
  out += fmt::format("State: {}\n", state);
  std::string ids;
  for (const auto& g : j["gpus"]) ids += (ids.empty() ? "" : ",") + std::to_string(g.get<int>());
  out += fmt::format("GPUs: {}{}\n", j["gpus"].size(), ids.empty() ? "" : " (" + ids + ")");
  out += fmt::format("Job Wall-clock time: {}\n", sacct_elapsed(elapsed));
  out += fmt::format("GPU-hours: {:.2f} ({:.0f} GPU-seconds)\n", j.value("gpu_hours", 0.0),
                     j.value("gpu_hours", 0.0) * 3600);
  out += gpu_lines(reply);
  out += fmt::format("CPU Utilized: {}\n", sacct_elapsed(static_cast<int64_t>(cpu_s)));
  out += cpu_efficiency_line(j, reply.value("now_ms", int64_t{0}), cpu_s, cpus);
  out += fmt::format("Peak RSS: {}\n",
                     bytes_text(static_cast<double>(u.value("peak_rss_bytes", int64_t{0}))));
  return out;
}

std::string format_array_stats(const nlohmann::json& reply) {
  const auto& tasks = reply.at("tasks");
  const size_t total = reply.value("tasks_total", tasks.size());
  std::string out =
      fmt::format("Job {} is an array of {} tasks; gpuq stats ID_TASK shows one in full\n",
                  common::escape_control(reply.value("array", std::string())), total);
  out += format_history(tasks, true);
  if (total > tasks.size()) out += fmt::format("and {} more tasks\n", total - tasks.size());
  return out;
}

std::string samples_csv(const nlohmann::json& samples) {
  std::string out = "time,gpu,util,mem_used_mib,power_w,temp_c\n";
  auto cell = [](const nlohmann::json& v) {
    return v.is_number() ? fmt::format("{}", v.get<double>()) : std::string();
  };
  for (const auto& s : samples)
    out += fmt::format("{},{},{},{},{},{}\n", utc_time(s[0].get<int64_t>()), s[1].get<int>(),
                       cell(s[2]), cell(s[3]), cell(s[5]), cell(s[6]));
  return out;
}

std::string format_report(const nlohmann::json& reply) {
  const std::string by = reply.value("by", "user");
  std::string out =
      fmt::format("GPU usage {} - {} (UTC), by {}\n", utc_time(reply["since_ms"].get<int64_t>()),
                  utc_time(reply["now_ms"].get<int64_t>()), by);
  out += fmt::format("{:<16} {:>6} {:>11} {:>9}\n", by == "user" ? "User" : "Account", "Jobs",
                     "GPU-hours", "MeanUtil");
  out += fmt::format("{} {} {} {}\n", std::string(16, '-'), std::string(6, '-'),
                     std::string(11, '-'), std::string(9, '-'));
  double hours = 0;
  int64_t jobs = 0;
  for (const auto& r : reply["rows"]) {
    std::string key = r["key"].get<std::string>();
    if (key.empty()) key = "(none)";
    out += fmt::format("{:<16} {:>6} {:>11.2f} {:>9}\n", common::escape_control(key).substr(0, 16),
                       r["jobs"].get<int64_t>(), r["gpu_hours"].get<double>(),
                       percent(opt(r["util_mean"])));
    hours += r["gpu_hours"].get<double>();
    jobs += r["jobs"].get<int64_t>();
  }
  out += fmt::format("{:<16} {:>6} {:>11.2f}\n", "TOTAL", jobs, hours);
  return out;
}

std::string gnuplot_script(const nlohmann::json& reply,
                           const std::map<int, std::string>& data_by_gpu,
                           const std::string& png_path, const std::string& terminal) {
  const auto& j = reply.at("job");
  auto quote = [](const std::string& s) {  // a gnuplot single-quoted string: '' is a quote
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  };
  int64_t t0 = INT64_MAX, t1 = 0;
  for (const auto& s : reply["samples"]) {
    t0 = std::min(t0, s[0].get<int64_t>());
    t1 = std::max(t1, s[0].get<int64_t>());
  }
  std::string title = common::escape_control(
      fmt::format("gpuq job {} ({}, {})", j["display_id"].get<std::string>(),
                  j["name"].get<std::string>(), j["user"].get<std::string>()));
  std::string out =
      fmt::format("set terminal {} size 1000,700\nset output {}\n", terminal, quote(png_path));
  out += fmt::format(
      "set datafile separator ','\nset xdata time\nset timefmt '%Y-%m-%dT%H:%M:%SZ'\n"
      "set format x '{}'\nset xlabel 'time (UTC)'\nset key outside right\nset grid\n"
      "set multiplot layout 2,1 title {}\n",
      t1 - t0 < 600000 ? "%H:%M:%S" : "%H:%M", quote(title));
  auto plot = [&](int column) {
    std::string p = "plot";
    for (const auto& [gpu, path] : data_by_gpu)
      p += fmt::format("{} {} using 1:{} every ::1 with lines lw 2 title 'GPU {}'",
                       p == "plot" ? "" : ",", quote(path), column, gpu);
    return p + "\n";
  };
  out += "set ylabel 'utilisation (%)'\nset yrange [0:105]\n" + plot(3);
  out += "set ylabel 'memory used (MiB)'\nset yrange [0:*]\n" + plot(4);
  return out + "unset multiplot\n";
}

int64_t parse_since(const std::string& text, int64_t now_ms) {
  if (text == "all") return 0;
  const std::map<char, int64_t> units = {{'m', 60}, {'h', 3600}, {'d', 86400}, {'w', 604800}};
  if (text.size() >= 2 && units.count(text.back()) &&
      text.find_first_not_of("0123456789") == text.size() - 1 && text.size() <= 8)
    return std::max<int64_t>(0, now_ms - std::stoll(text) * units.at(text.back()) * 1000);
  tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end || *end) {
    tm = {};
    end = strptime(text.c_str(), "%Y-%m-%d", &tm);
  }
  if (!end || *end)
    throw std::invalid_argument(fmt::format(
        "--since '{}': expected a span (30m, 12h, 7d, 2w), a date (2026-11-01), a local time "
        "(2026-11-01T08:00:00) or 'all'",
        text));
  tm.tm_isdst = -1;
  time_t t = mktime(&tm);
  if (t < 0 || int64_t{t} * 1000 > now_ms)
    throw std::invalid_argument(fmt::format("--since '{}' is not in the past", text));
  return int64_t{t} * 1000;
}

}  // namespace gpurun::queue

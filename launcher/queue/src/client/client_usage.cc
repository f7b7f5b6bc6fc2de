// gpuq's usage commands: `gpuq stats ID [--csv | --plot FILE.png]` (like seff) and
// `gpuq report [--since 7d] [--by user|account]` (like sreport).
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <stdexcept>

#include "client/client.h"
#include "gpurun/common/atomic_file.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/terminal.h"
#include "gpurun/queue/format.h"
#include "gpurun/queue/usage_format.h"
#include "job/request.h"
#include "supervise/runfiles.h"

extern char** environ;

namespace gpurun::queue {
namespace po = boost::program_options;

namespace {

// Runs gnuplot on `script` (through a file: no shell, no quoting of user text on a command line);
// returns its exit status, or -1 when it cannot start.
int run_gnuplot(const std::string& script_path, const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char* argv[] = {const_cast<char*>("gnuplot"), const_cast<char*>(script_path.c_str()), nullptr};
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// Draws the plot into a temp name next to `png` and renames it: a failed run leaves no half file.
void plot_png(const nlohmann::json& reply, const std::string& png) {
  if (reply["samples"].empty())
    throw std::runtime_error(
        fmt::format("job {} has no samples to plot (sampling off, expired, or "
                    "the job ran less than one sample interval)",
                    reply["job"]["display_id"].get<std::string>()));
  char tpl[] = "/tmp/gpuq-plot-XXXXXX";
  if (!mkdtemp(tpl)) throw std::runtime_error("cannot create a temp dir for gnuplot");
  const std::string dir = tpl, tmp_png = png + ".tmp";
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  // One file per GPU: gnuplot draws a line through consecutive rows of a file.
  std::map<int, nlohmann::json> by_gpu;
  for (const auto& s : reply["samples"]) by_gpu[s[1].get<int>()].push_back(s);
  std::map<int, std::string> files;
  for (const auto& [gpu, samples] : by_gpu) {
    files[gpu] = fmt::format("{}/gpu{}.csv", dir, gpu);
    common::write_file_atomic(files[gpu], samples_csv(samples), 0600, common::Durability::kNoSync);
  }
  int rc = -1;
  for (const char* term : {"pngcairo", "png"}) {  // pngcairo draws smoother; png is always there
    common::write_file_atomic(dir + "/plot.gp", gnuplot_script(reply, files, tmp_png, term), 0600,
                              common::Durability::kNoSync);
    rc = run_gnuplot(dir + "/plot.gp", dir + "/gnuplot.log");
    if (rc == 0 || rc == -1) break;
  }
  if (rc == -1) {
    throw std::runtime_error("gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
  }
  if (rc != 0 || !std::filesystem::exists(tmp_png)) {
    ::unlink(tmp_png.c_str());
    auto log = read_file(dir + "/gnuplot.log").value_or("");
    throw std::runtime_error(fmt::format("gnuplot failed (exit {}): {}", rc, log.substr(0, 500)));
  }
  if (::rename(tmp_png.c_str(), png.c_str()) != 0) {
    ::unlink(tmp_png.c_str());
    throw std::runtime_error(fmt::format("cannot write {}: {}", png, strerror(errno)));
  }
}

}  // namespace

int cmd_stats(const Args& a) {
  po::options_description desc("gpuq stats options");
  desc.add_options()("csv", "print the job's samples as CSV")(
      "plot", po::value<std::string>(), "draw utilisation and memory over time into this PNG")(
      "json", "the daemon's JSON reply")("id", po::value<std::string>(), "job id (N or N_T)");
  po::positional_options_description pos;
  pos.add("id", 1);
  Parsed p;
  if (!parse(a, desc, &pos,
             "usage: gpuq stats ID [--csv | --plot FILE.png | --json]\n"
             "What a job used (like seff): elapsed, GPU-hours, mean and max GPU utilisation, max\n"
             "GPU memory, CPU efficiency, peak RSS. --csv prints the samples with the header\n"
             "time,gpu,util,mem_used_mib,power_w,temp_c. An array's ID lists its tasks (like\n"
             "sacct), one line each.",
             &p))
    return 0;
  if (!p.vm.count("id")) throw std::invalid_argument("gpuq stats: no job id given");
  if (p.vm.count("csv") + p.vm.count("plot") + p.vm.count("json") > 1)
    throw std::invalid_argument("gpuq stats: give at most one of --csv, --plot, --json");
  const std::string id = p.vm["id"].as<std::string>();
  auto reply = call(p.socket, {{"op", "stats"}, {"ids", {id}}});
  const bool array = reply.contains("tasks");
  if (array && (p.vm.count("csv") || p.vm.count("plot")))
    throw std::invalid_argument(fmt::format(
        "gpuq stats: job {} is an array of {} tasks: --csv and --plot take one task (ID_TASK)", id,
        reply.value("tasks_total", reply["tasks"].size())));
  if (p.vm.count("json")) {
    std::cout << reply.dump(2) << "\n";
  } else if (p.vm.count("csv")) {
    std::cout << samples_csv(reply["samples"]);
  } else if (p.vm.count("plot")) {
    plot_png(reply, p.vm["plot"].as<std::string>());
    fmt::print("wrote {}\n", p.vm["plot"].as<std::string>());
  } else {
    std::cout << (array ? format_array_stats(reply) : format_stats(reply));
  }
  return 0;
}

int cmd_report(const Args& a) {
  po::options_description desc("gpuq report options");
  desc.add_options()("since,S", po::value<std::string>()->default_value("7d"),
                     "from when: 30m, 12h, 7d, 2w, 2026-11-01, 2026-11-01T08:00:00, all")(
      "by", po::value<std::string>()->default_value("user"), "user or account")(
      "json", "the daemon's JSON reply");
  Parsed p;
  if (!parse(a, desc, nullptr,
             "usage: gpuq report [--since 7d] [--by user|account] [--json]\n"
             "GPU usage per user (like sreport): jobs, GPU-hours held within the window (running\n"
             "jobs up to now) and their mean GPU utilisation.",
             &p))
    return 0;
  const std::string by = p.vm["by"].as<std::string>();
  if (by != "user" && by != "account")
    throw std::invalid_argument(fmt::format("gpuq report --by '{}': expected user or account", by));
  int64_t since = parse_since(p.vm["since"].as<std::string>(), now_ms());
  auto reply = call(p.socket, {{"op", "report"}, {"since_ms", since}, {"by", by}});
  if (p.vm.count("json"))
    std::cout << reply.dump(2) << "\n";
  else
    std::cout << format_report(reply);
  return 0;
}

}  // namespace gpurun::queue

namespace gpurun::queue {

namespace {

// One line per budget: subject, period, budget, spent, left (GPU-hours).
std::string format_budgets(const nlohmann::json& reply) {
  std::string out = fmt::format("{:<20} {:>7} {:>10} {:>10} {:>10}\n", "SUBJECT", "PERIOD",
                                "GPU-HOURS", "SPENT", "LEFT");
  for (const auto& b : reply["budgets"])
    out += fmt::format("{:<20} {:>7} {:>10.2f} {:>10.2f} {:>10.2f}\n",
                       b["subject"].get<std::string>(), b["period"].get<std::string>(),
                       b["hours"].get<double>(), b["spent_hours"].get<double>(),
                       b["left_hours"].get<double>());
  if (reply["budgets"].empty()) out += "(no budget set)\n";
  return out;
}

// A plain decimal number (12, 0.5): not hex (0x10), an exponent, inf or nan, which stod takes.
double parse_hours(const std::string& text) {
  size_t used = 0;
  double h = -1;
  const bool decimal = !text.empty() &&
                       text.find_first_not_of("0123456789.") == std::string::npos &&
                       std::count(text.begin(), text.end(), '.') <= 1 && text != ".";
  try {
    if (decimal) h = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  if (used != text.size() || !(h >= 0) || h > kMaxBudgetHours)
    throw std::invalid_argument(
        fmt::format("gpuq budget set: '{}' is not a number of GPU-hours (0 to {:g})", text,
                    kMaxBudgetHours));
  return h;
}

// --per's word in any case, as -t and --export take theirs.
std::string budget_period(const std::string& text) {
  std::string p = text;
  std::transform(p.begin(), p.end(), p.begin(), [](unsigned char c) { return std::tolower(c); });
  if (p != "week" && p != "month" && p != "total")
    throw std::invalid_argument(
        fmt::format("gpuq budget set --per '{}': expected week, month or total",
                    common::escape_control(text.substr(0, 40))));
  return p;
}

// A user by uid too, as queue -u takes one: the name the budget is kept under.
std::string budget_subject(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 10)
    return text;
  const unsigned long long uid = std::stoull(text);
  if (uid > UINT32_MAX) return text;
  const auto pw = common::passwd_entry(static_cast<std::uint32_t>(uid));
  return pw ? pw->name : text;
}

}  // namespace

int cmd_budget(const Args& a) {
  po::options_description desc("gpuq budget options");
  desc.add_options()("per", po::value<std::string>()->default_value("total"),
                     "set: the period, week (from Monday 00:00 UTC), month or total")(
      "json", "the daemon's JSON reply")("words", po::value<std::vector<std::string>>(),
                                         "the words after budget: [set|clear] SUBJECT [HOURS]");
  po::positional_options_description pos;
  pos.add("words", -1);
  Parsed p;
  if (!parse(a, desc, &pos,
             "usage: gpuq budget [USER|@ACCOUNT]\n"
             "       gpuq budget set USER|@ACCOUNT HOURS [--per week|month|total]\n"
             "       gpuq budget clear USER|@ACCOUNT\n"
             "GPU-hour budgets (credits): what each user or account may spend per period, what\n"
             "it spent and what is left. A job that would start past a budget waits with the\n"
             "reason AssocGrpGRESMinutes. Only root or the daemon's owner sets budgets.",
             &p))
    return 0;
  auto words = p.vm.count("words") ? p.vm["words"].as<std::vector<std::string>>()
                                   : std::vector<std::string>{};
  nlohmann::json req = {{"op", "budget"}};
  if (!words.empty() && (words[0] == "set" || words[0] == "clear")) {
    const bool set = words[0] == "set";
    if (words.size() != (set ? 3u : 2u))
      throw std::invalid_argument(set ? "usage: gpuq budget set USER|@ACCOUNT HOURS [--per P]"
                                      : "usage: gpuq budget clear USER|@ACCOUNT");
    req = {{"op", "budget_set"},
           {"subject", budget_subject(words[1])},
           {"period", budget_period(p.vm["per"].as<std::string>())}};
    if (set)
      req["hours"] = parse_hours(words[2]);
    else
      req["clear"] = true;
  } else if (words.size() == 1) {
    req["subject"] = budget_subject(words[0]);
  } else if (!words.empty()) {
    throw std::invalid_argument("usage: gpuq budget [USER|@ACCOUNT] (see gpuq budget --help)");
  }
  auto reply = call(p.socket, req);
  std::cout << (p.vm.count("json") ? reply.dump(2) + "\n" : format_budgets(reply));
  return 0;
}

}  // namespace gpurun::queue

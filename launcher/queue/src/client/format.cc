// squeue/sacct/scontrol-style formatting (format.h).
#include "gpurun/queue/format.h"

#include <fmt/format.h>

#include <algorithm>

#include "gpurun/common/terminal.h"
#include "gpurun/queue/job_json.h"
#include "gpurun/queue/sbatch.h"

namespace gpurun::queue {
namespace {

using common::escape_control;  // every user-controlled string, before it reaches a terminal

std::string str(const nlohmann::json& j, const char* key) {
  return escape_control(j.value(key, std::string()));
}

// squeue's "%.Nx": right-aligned in N columns, cut to N characters.
std::string right(const std::string& s, size_t w) {
  std::string t = s.size() > w ? s.substr(0, w) : s;
  return std::string(w - t.size(), ' ') + t;
}

// sacct cuts long values to width-1 characters plus '+'.
std::string sacct_cell(const std::string& s, size_t w, bool left) {
  std::string t = s.size() > w ? s.substr(0, w - 1) + "+" : s;
  std::string pad(w - t.size(), ' ');
  return left ? t + pad : pad + t;
}

std::string id_list(const nlohmann::json& gpus) {
  std::string out;
  for (const auto& g : gpus) out += (out.empty() ? "" : ",") + std::to_string(g.get<int>());
  return out;
}

int64_t elapsed_s(const nlohmann::json& j, int64_t now_ms) {
  int64_t start = j.value("start_ms", int64_t{0});
  if (start == 0) return 0;
  int64_t end = j.value("end_ms", int64_t{0});
  return std::max<int64_t>(0, ((end ? end : now_ms) - start) / 1000);
}

// A job's elapsed seconds as the reply gives them (a brief: up to the daemon's now, for a running
// job too), else from its start and end.
int64_t shown_elapsed(const nlohmann::json& j) {
  return j.contains("elapsed_s") ? j["elapsed_s"].get<int64_t>() : elapsed_s(j, 0);
}

// GPUHours (GPUs held x elapsed, and the runs before a requeue) and MeanUtil (over the last
// run's samples; "-" without any).
std::string usage_cells(const nlohmann::json& j) {
  // A brief (an array's tasks in `gpuq stats`) has them, up to the daemon's now.
  double hours =
      j.contains("gpu_hours")
          ? j["gpu_hours"].get<double>()
          : (static_cast<double>(j["gpus"].size()) * static_cast<double>(elapsed_s(j, 0)) +
             j.value("earlier_gpu_seconds", 0.0)) /
                3600.0;
  auto mean = util_mean(usage_from_json(j.value("usage", nlohmann::json::object())));
  return sacct_cell(fmt::format("{:.2f}", hours), 8, false) + " " +
         sacct_cell(mean ? fmt::format("{:.1f}%", *mean) : "-", 8, false);
}

}  // namespace

std::string squeue_time(int64_t s) {
  int64_t d = s / 86400, h = (s / 3600) % 24, m = (s / 60) % 60, sec = s % 60;
  if (d > 0) return fmt::format("{}-{:02}:{:02}:{:02}", d, h, m, sec);
  if (h > 0) return fmt::format("{}:{:02}:{:02}", h, m, sec);
  return fmt::format("{}:{:02}", m, sec);
}

std::string time_limit_text(int64_t s) {
  return s == 0 ? "UNLIMITED" : squeue_time(s);
}

std::string sacct_elapsed(int64_t s) {
  int64_t d = s / 86400, h = (s / 3600) % 24, m = (s / 60) % 60, sec = s % 60;
  if (d > 0) return fmt::format("{}-{:02}:{:02}:{:02}", d, h, m, sec);
  return fmt::format("{:02}:{:02}:{:02}", h, m, sec);
}

std::string exit_code_text(int code, int signal) {
  return fmt::format("{}:{}", code, signal);
}

std::string local_time(int64_t ms) {
  time_t t = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  localtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

QueueRow queue_row_from_json(const nlohmann::json& j, int64_t now_ms) {
  QueueRow r;
  r.id = j.at("display_id").get<std::string>();
  r.name = j.at("name").get<std::string>();
  r.user = j.at("user").get<std::string>();
  r.running = j.at("state") == "RUNNING";
  r.completing = j.value("completing", false);
  r.reason = j.value("reason", std::string("None"));
  r.nodelist = j.value("nodelist", std::string());
  r.elapsed_s = elapsed_s(j, now_ms);
  r.time_limit_s = j.value("time_limit_s", int64_t{0});
  r.gpus_requested = j.value("gpus_requested", 0);
  r.gpus = j.value("gpus", std::vector<int>{});
  r.position = j.value("position", 0);
  r.expected_start_ms = j.value("expected_start_ms", int64_t{0});
  return r;
}

std::string format_queue(const std::vector<QueueRow>& rows, QueueFormat f, bool header) {
  const bool lng = f == QueueFormat::kLong;
  const bool start = f == QueueFormat::kStart;
  std::string out;
  out.reserve((rows.size() + 1) * 80);
  if (header) {
    out += right("JOBID", 18) + " " + right("NAME", 8) + " " + right("USER", 8) + " " +
           right("ST", 2) + " " + right("TIME", 10) + " ";
    if (lng) out += right("TIME_LIMIT", 10) + " ";
    if (start) out += right("START_TIME", 19) + " " + right("POS", 4) + " ";
    out += right("GPUS", 4) + " NODELIST(REASON)\n";
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const QueueRow& r : rows) {
      if (r.running != (pass == 0)) continue;
      out += right(escape_control(r.id), 18);
      out += ' ';
      out += right(escape_control(r.name), 8);
      out += ' ';
      out += right(escape_control(r.user), 8);
      out += r.completing ? " CG " : r.running ? "  R " : " PD ";
      out += right(squeue_time(r.elapsed_s), 10);
      out += ' ';
      if (lng) out += right(time_limit_text(r.time_limit_s), 10) + " ";
      if (start) {
        const bool known = !r.running && r.expected_start_ms;
        out += right(known ? local_time(r.expected_start_ms) : "N/A", 19) + " ";
        out += right(r.running || !r.position ? "-" : std::to_string(r.position), 4) + " ";
      }
      out += right(std::to_string(r.gpus_requested), 4);
      out += ' ';
      if (r.running) {
        out += escape_control(r.nodelist);
        if (lng && !r.gpus.empty()) {  // a CPU job's has none to name
          std::string ids;
          for (int g : r.gpus) ids += (ids.empty() ? "" : ",") + std::to_string(g);
          out += " gpu:" + ids;
        }
      } else {
        out += "(" + escape_control(r.reason) + ")";
      }
      out += '\n';
    }
  }
  return out;
}

std::string format_history(const nlohmann::json& jobs, bool header) {
  std::string out;
  if (header) {
    out += sacct_cell("JobID", 12, true) + " " + sacct_cell("JobName", 10, false) + " " +
           sacct_cell("User", 9, false) + " " + sacct_cell("State", 10, false) + " " +
           sacct_cell("ExitCode", 8, false) + " " + sacct_cell("Elapsed", 10, false) + " " +
           sacct_cell("GPUs", 8, false) + " " + sacct_cell("GPUHours", 8, false) + " " +
           sacct_cell("MeanUtil", 8, false) + "\n";
    out += std::string(12, '-') + " " + std::string(10, '-') + " " + std::string(9, '-') + " " +
           std::string(10, '-') + " " + std::string(8, '-') + " " + std::string(10, '-') + " " +
           std::string(8, '-') + " " + std::string(8, '-') + " " + std::string(8, '-') + "\n";
  }
  for (const auto& j : jobs) {
    std::string state = j["state"].get<std::string>();
    std::string reason = j.value("reason", std::string());
    if (state == "CANCELLED" && reason.rfind("CANCELLED by", 0) == 0) state = reason;
    // GPUs is how many the job held, as queue's GPUS column and the page count them (show and
    // stats name them).
    out +=
        sacct_cell(str(j, "display_id"), 12, true) + " " + sacct_cell(str(j, "name"), 10, false) +
        " " + sacct_cell(str(j, "user"), 9, false) + " " +
        sacct_cell(escape_control(state), 10, false) + " " +
        sacct_cell(exit_code_text(j.value("exit_code", 0), j.value("exit_signal", 0)), 8, false) +
        " " + sacct_cell(sacct_elapsed(shown_elapsed(j)), 10, false) + " " +
        sacct_cell(std::to_string(j["gpus"].size()), 8, false) + " " + usage_cells(j) + "\n";
  }
  return out;
}

std::string format_show(const nlohmann::json& j, int64_t now_ms) {
  auto ts = [](int64_t ms) { return ms == 0 ? std::string("None") : local_time(ms); };
  std::string deps;
  for (const auto& d : j["dependencies"])
    deps += (deps.empty() ? "" : ",") +
            fmt::format("{}:{}{}", d["type"].get<std::string>(), d["job_id"].get<int64_t>(),
                        d.contains("task") ? fmt::format("_{}", d["task"].get<int>()) : "");
  std::string out = fmt::format("JobId={} JobName={}\n", str(j, "display_id"), str(j, "name"));
  if (j["array_job_id"].get<int64_t>() != 0)
    out += fmt::format("   ArrayJobId={} ArrayTaskId={} ArrayTaskThrottle={}\n",
                       j["array_job_id"].get<int64_t>(), j["array_task_id"].get<int>(),
                       j["array_max_running"].get<int>());
  const std::string account = str(j, "account");
  out += fmt::format("   UserId={}({}) GroupId={} Priority={} Account={}\n", str(j, "user"),
                     j["uid"].get<uint32_t>(), j["gid"].get<uint32_t>(), j["priority"].get<int>(),
                     account.empty() ? "(null)" : account);
  const std::string reason = str(j, "reason");
  const std::string state = j.value("completing", false) ? "COMPLETING" : str(j, "state");
  out += fmt::format("   JobState={} Reason={} Dependency={}\n", state,
                     reason.empty() ? "None" : reason, deps.empty() ? "(null)" : deps);
  // Requeue=1: `gpuq requeue` (or gpurun --requeue) may put it back, as scontrol says of a
  // requeueable job: a batch job not submitted with --no-requeue.
  const bool requeueable = !j.value("no_requeue", false) && !j.value("interactive", false);
  out += fmt::format("   Requeue={} Restarts={} ExitCode={}\n", requeueable ? 1 : 0,
                     j["restart_count"].get<int>(),
                     exit_code_text(j["exit_code"].get<int>(), j["exit_signal"].get<int>()));
  out += fmt::format("   RunTime={} TimeLimit={}\n", squeue_time(elapsed_s(j, now_ms)),
                     time_limit_text(j["time_limit_s"].get<int64_t>()));
  // A pending job's StartTime is its expected start, as scontrol shows it (Unknown: none yet).
  const bool pending = str(j, "state") == "PENDING";
  const int64_t expected = j.value("expected_start_ms", int64_t{0});
  out += fmt::format("   SubmitTime={} StartTime={} EndTime={}\n", ts(j["submit_ms"]),
                     pending ? (expected ? local_time(expected) : "Unknown") : ts(j["start_ms"]),
                     ts(j["end_ms"]));
  if (pending && j.value("position", 0) > 0)
    out += fmt::format("   Position={} (next to start: 1)\n", j["position"].get<int>());
  out += fmt::format("   NodeList={} NumGPUs={} GPUs={}\n", str(j, "nodelist"),
                     j["gpus_requested"].get<int>(), id_list(j["gpus"]));
  if (j.value("shards", 0) > 0)
    out += fmt::format("   Gres=shard:{} ShardsPerGPU={}\n", j["shards"].get<int>(),
                       j.value("shards_per_gpu", 0));
  int sig = j["signal"]["signal"].get<int>();
  if (sig)
    out +=
        fmt::format("   Signal={}@{}{}\n", signal_name(sig), j["signal"]["lead_seconds"].get<int>(),
                    j["signal"]["batch_only"].get<bool>() ? " (batch shell only)" : "");
  // Paths only reach their owner (and root): the daemon leaves them out for anyone else.
  if (j.contains("cwd")) out += fmt::format("   WorkDir={}\n", str(j, "cwd"));
  // As scontrol: MailUser (the submitter when --mail-user was not given), MailType (NONE).
  if (j.contains("mail_type")) {
    std::string types;
    for (const auto& t : j["mail_type"]) types += (types.empty() ? "" : ",") + t.get<std::string>();
    const std::string user = str(j, "mail_user");
    out += fmt::format("   MailUser={} MailType={}\n", user.empty() ? str(j, "user") : user,
                       types.empty() ? "NONE" : types);
  }
  if (j.contains("stdout_path")) {
    out += fmt::format("   StdOut={}\n", str(j, "stdout_path"));
    out += fmt::format("   StdErr={}\n", str(j, "stderr_path"));
  }
  return out;
}

}  // namespace gpurun::queue

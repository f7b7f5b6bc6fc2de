// /metrics of `gpuq web` (web_render.h): Prometheus' text exposition format, version 0.0.4
// (prometheus.io/docs/instrumenting/exposition_formats: "# HELP"/"# TYPE" lines, label values with
// \\, \" and \n escaped). The gpu label is the id gpuq schedules; ratios are 0-1.
#include <fmt/format.h>

#include "gpurun/queue/web_render.h"

namespace gpurun::queue {
namespace {

std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// A sample value as Prometheus reads it: the shortest text of the value to 15 significant digits,
// so 41 * 0.01 is 0.41, not 0.41000000000000003, and a sum of GPU-seconds shows no float noise.
std::string number(double v) {
  return fmt::format("{}", std::stod(fmt::format("{:.15g}", v)));
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// One gauge per GPU from a figure of the newest sample; GPUs without the figure get no line.
void per_gpu(std::string& out, const nlohmann::json& gpus, const char* name, const char* help,
             const char* field, double scale) {
  family(out, name, "gauge", help);
  for (const auto& g : gpus)
    if (g[field].is_number())
      out += fmt::format("{}{{gpu=\"{}\"}} {}\n", name, g["id"].get<int>(),
                         number(g[field].get<double>() * scale));
}

// GPU-hour budgets (gpuq budget): each one, and what its subject spent in the current period.
void budgets(std::string& out, const nlohmann::json& rows) {
  for (const char* field : {"hours", "spent_hours"}) {
    std::string name = std::string("gpuq_budget_") + (*field == 'h' ? "gpu_hours" : "spent_gpu_hours");
    family(out, name.c_str(), "gauge",
           *field == 'h' ? "A user's (or @account's) GPU-hour budget for its period."
                         : "GPU-hours the user (or @account) spent in the budget's current period.");
    for (const auto& b : rows)
      out += fmt::format("{}{{subject=\"{}\",period=\"{}\"}} {}\n", name,
                         label(b["subject"].get<std::string>()), label(b["period"].get<std::string>()),
                         number(b[field].get<double>()));
  }
}

// Shared GPUs (--shards-per-gpu): each one's shards, and those held.
void shards(std::string& out, const nlohmann::json& gpus) {
  for (const char* field : {"total", "held"}) {
    std::string name = std::string("gpuq_gpu_shards_") + field;
    family(out, name.c_str(), "gauge",
           *field == 't' ? "Shards the GPU offers to shard jobs (--shards-per-gpu)."
                         : "Shards of the GPU that running shard jobs hold.");
    for (const auto& g : gpus)
      if (g.value("shards", nlohmann::json()).is_object())
        out += fmt::format("{}{{gpu=\"{}\"}} {}\n", name, g["id"].get<int>(),
                           g["shards"][field].get<int>());
  }
}

// The flags (issue 30, item 4): processes outside the queue, a busy GPU with no job, a job that
// holds its GPU idle.
void flags(std::string& out, const nlohmann::json& gpus, int64_t now_ms) {
  family(out, "gpuq_gpu_outside_processes", "gauge",
         "Processes on the GPU that no job holding it owns (newest sample).");
  for (const auto& g : gpus)
    out += fmt::format("gpuq_gpu_outside_processes{{gpu=\"{}\"}} {}\n", g["id"].get<int>(),
                       g.value("outside", nlohmann::json::array()).size());
  family(out, "gpuq_gpu_busy_without_job", "gauge",
         "1 when no job holds the GPU but a process or its figures say it is in use.");
  for (const auto& g : gpus)
    out += fmt::format("gpuq_gpu_busy_without_job{{gpu=\"{}\"}} {}\n", g["id"].get<int>(),
                       g.value("busy_without_job", false) ? 1 : 0);
  // Per held GPU, labelled with its job and user; one family after the other, never interleaved.
  auto held = [&](const char* name, const char* help, auto value) {
    family(out, name, "gauge", help);
    for (const auto& g : gpus)
      if (g["state"] == "busy")
        out += fmt::format("{}{{gpu=\"{}\",job=\"{}\",user=\"{}\"}} {}\n", name,
                           g["id"].get<int>(), label(g["job"]["display_id"].get<std::string>()),
                           label(g["job"]["user"].get<std::string>()), value(g));
  };
  held("gpuq_job_gpu_idle_seconds",
       "How long the job has held the GPU below the idle threshold without a break (0: not).",
       [&](const nlohmann::json& g) {
         const auto& since = g.value("idle_since_ms", nlohmann::json());
         int64_t ms = since.is_number() ? std::max<int64_t>(0, now_ms - since.get<int64_t>()) : 0;
         return number(ms / 1000.0);
       });
  held("gpuq_job_gpu_idle",
       "1 when the job has held the GPU below the idle threshold for the idle time or longer.",
       [](const nlohmann::json& g) { return std::string(g.value("idle", false) ? "1" : "0"); });
}

}  // namespace

std::string render_metrics(const nlohmann::json& s) {
  std::string out;
  const auto& gpus = s["gpus"];
  per_gpu(out, gpus, "gpuq_gpu_utilization_ratio", "GPU utilisation in the newest sample (0-1).",
          "util_percent", 0.01);
  per_gpu(out, gpus, "gpuq_gpu_memory_used_bytes", "GPU memory used in the newest sample.",
          "mem_used_mib", 1024.0 * 1024.0);
  per_gpu(out, gpus, "gpuq_gpu_memory_total_bytes", "GPU memory in all.", "mem_total_mib",
          1024.0 * 1024.0);
  per_gpu(out, gpus, "gpuq_gpu_power_watts", "GPU power draw in the newest sample.", "power_w",
          1.0);
  per_gpu(out, gpus, "gpuq_gpu_temperature_celsius", "GPU temperature in the newest sample.",
          "temp_c", 1.0);
  family(out, "gpuq_gpu_allocated", "gauge",
         "1 while a job holds the GPU; for a shard job, the share of the GPU it holds.");
  for (const auto& g : gpus) {
    auto line = [&](const nlohmann::json& j, double share) {
      out += fmt::format("gpuq_gpu_allocated{{gpu=\"{}\",job=\"{}\",user=\"{}\"}} {}\n",
                         g["id"].get<int>(), label(j["display_id"].get<std::string>()),
                         label(j["user"].get<std::string>()), number(share));
    };
    if (g["state"] == "busy") line(g["job"], 1);
    if (g["state"] == "shared")
      for (const auto& j : g["shards"]["jobs"])
        line(j, double(j["shards"].get<int>()) / g["shards"]["total"].get<int>());
  }
  shards(out, gpus);
  flags(out, gpus, s["now_ms"].get<int64_t>());
  family(out, "gpuq_jobs", "gauge", "Jobs the queue knows, by state.");
  for (const auto& [state, n] : s["jobs_by_state"].items())
    out += fmt::format("gpuq_jobs{{state=\"{}\"}} {}\n", label(state), n.get<int64_t>());
  family(out, "gpuq_user_gpu_seconds_total", "counter",
         "GPU-seconds held by each user's jobs, running ones up to now.");
  for (const auto& [user, secs] : s["user_gpu_seconds"].items())
    out += fmt::format("gpuq_user_gpu_seconds_total{{user=\"{}\"}} {}\n", label(user),
                       number(secs.get<double>()));
  budgets(out, s.value("budgets", nlohmann::json::array()));
  family(out, "gpuq_sample_timestamp_seconds", "gauge",
         "When the GPUs were last sampled (0: not yet, or sampling off).");
  out += fmt::format("gpuq_sample_timestamp_seconds {}\n",
                     number(s["sampler"]["time_ms"].get<int64_t>() / 1000.0));
  return out;
}

}  // namespace gpurun::queue

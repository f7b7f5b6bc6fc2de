// HTML pages of `gpuq web` (web_render.h). Server-side only: the page refreshes itself with a
// meta refresh, carries its own small stylesheet, and every user-given string goes through
// html_escape.
#include "gpurun/queue/web_render.h"

#include <fmt/format.h>

#include <map>

#include "gpurun/common/terminal.h"
#include "gpurun/queue/format.h"
#include "gpurun/queue/usage_format.h"

namespace gpurun::queue {
namespace {

constexpr const char* kStyle =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.2em;color:#1d2125;"
    "background:#fff}h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.2em 0 .4em}"
    ".meta{color:#5a6570;font-size:.9em;margin:0}.tiles{display:flex;flex-wrap:wrap;gap:.8em}"
    ".tile{border:1px solid #c9d1d9;border-radius:8px;padding:.6em .8em;width:12.5em;"
    "background:#f8fafc}.tile.busy{border-color:#2f81f7;background:#eef5ff}"
    ".tile.free .state{color:#1a7f37;font-weight:600}.tile.unseen{opacity:.7}"
    ".gpu-id{font-weight:700}.gpu-name{font-size:.8em;color:#5a6570}.job{margin-top:.3em}"
    ".job-id{font-weight:600}.user{color:#6639ba}.job-name{overflow:hidden;text-overflow:ellipsis;"
    "white-space:nowrap}.figures{font-size:.8em;color:#3d4650}table{border-collapse:collapse;"
    "font-size:.9em}th,td{border-bottom:1px solid #e1e4e8;padding:.25em .6em;text-align:left}"
    "th{background:#f1f3f5}td.num{text-align:right}.err{color:#b42318}footer{margin-top:1.5em;"
    "font-size:.85em;color:#5a6570}.tile.outside{border-color:#d1242f;background:#fff1f0}"
    ".tile.flagged{border-color:#bf8700;background:#fff8e5}.state.warn,.flag{color:#9a6700;"
    "font-weight:600}.tile.outside .state{color:#b42318;font-weight:600}.outside-use,.flag"
    "{font-size:.85em}";

std::string opt_num(const nlohmann::json& v, const char* fmt_spec, const char* unit) {
  if (!v.is_number()) return "-";
  return fmt::format(fmt::runtime(fmt_spec), v.get<double>()) + unit;
}

std::string head(const std::string& title, int refresh_s) {
  std::string refresh =
      refresh_s > 0 ? fmt::format("<meta http-equiv=\"refresh\" content=\"{}\">", refresh_s) : "";
  return fmt::format(
      "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">{}<meta name=\"viewport\" "
      "content=\"width=device-width,initial-scale=1\"><title>{}</title><style>{}</style></head>"
      "<body>",
      refresh, html_escape(title), kStyle);
}

std::string job_link(const nlohmann::json& j) {
  std::string id = html_escape(j["display_id"].get<std::string>());
  return fmt::format("<a class=\"job-id\" href=\"/job/{0}\">{0}</a>", id);
}

// The processes outside the queue on a GPU: "pid 4242 bob python 27.9 GB" each.
std::string outside_uses(const nlohmann::json& g) {
  std::string out;
  for (const auto& u : g.value("outside", nlohmann::json::array()))
    out += fmt::format(
        "<div class=\"outside-use\">pid {} <span class=\"user\">{}</span> {}{}</div>",
        u["pid"].get<int>(), html_escape(u["user"].get<std::string>()),
        html_escape(u["command"].get<std::string>()),
        u["mem_used_mib"].is_number()
            ? fmt::format(" &middot; {:.1f} GB", u["mem_used_mib"].get<double>() / 1024.0)
            : "");
  return out;
}

// A running job's line, with a flag when it has held its GPU idle too long.
std::string tile_job(const nlohmann::json& g, int64_t now_ms, const nlohmann::json& sampler) {
  const auto& j = g["job"];
  int64_t elapsed = std::max<int64_t>(0, (now_ms - j["start_ms"].get<int64_t>()) / 1000);
  std::string out = fmt::format(
      "<div class=\"job\">job {} <span class=\"user\">{}</span></div><div class=\"job-name\" "
      "title=\"{}\">{}</div><div class=\"elapsed\">{}</div>",
      job_link(j), html_escape(j["user"].get<std::string>()),
      html_escape(j["name"].get<std::string>()), html_escape(j["name"].get<std::string>()),
      squeue_time(elapsed));
  if (g.value("idle", false))
    out += fmt::format(
        "<div class=\"flag idle-flag\">idle: below {}% for {}</div>",
        sampler.value("idle_percent", 0.0),
        squeue_time(std::max<int64_t>(0, (now_ms - g["idle_since_ms"].get<int64_t>()) / 1000)));
  return out;
}

// A shared GPU's shards: how many are held, and one line per shard job.
std::string tile_shards(const nlohmann::json& g) {
  const auto& sh = g["shards"];
  std::string out = fmt::format("<div class=\"shards\">shards {} of {} held</div>",
                                sh["held"].get<int>(), sh["total"].get<int>());
  for (const auto& j : sh["jobs"])
    out += fmt::format(
        "<div class=\"job shard-job\">job {} <span class=\"user\">{}</span> &middot; {} "
        "shard{}</div>",
        job_link(j), html_escape(j["user"].get<std::string>()), j["shards"].get<int>(),
        j["shards"].get<int>() == 1 ? "" : "s");
  return out;
}

// GPU-hour budgets: subject, period, budget, spent, left (nothing when none is set).
std::string budget_table(const nlohmann::json& rows) {
  if (rows.empty()) return "";
  std::string out =
      "<section><h2>Budgets</h2><table id=\"budgets\"><tr><th>User or @account</th><th>Period</th>"
      "<th>GPU-hours</th><th>Spent</th><th>Left</th></tr>";
  for (const auto& b : rows)
    out += fmt::format(
        "<tr class=\"budget{}\"><td>{}</td><td>{}</td><td class=\"num\">{:.2f}</td>"
        "<td class=\"num\">{:.2f}</td><td class=\"num\">{:.2f}</td></tr>",
        b["left_hours"].get<double>() <= 0 ? " spent" : "", html_escape(b["subject"].get<std::string>()),
        html_escape(b["period"].get<std::string>()), b["hours"].get<double>(),
        b["spent_hours"].get<double>(), b["left_hours"].get<double>());
  return out + "</table></section>";
}

std::string tile(const nlohmann::json& g, int64_t now_ms, const nlohmann::json& sampler) {
  const std::string state = g["state"].get<std::string>();
  const bool busy = state == "busy";
  const bool flagged = g.value("idle", false) || g.value("busy_without_job", false);
  std::string cls = busy || state == "shared" ? "busy" : state == "outside" ? "outside" : "free";
  if (state == "shared") cls += " shared";
  if (flagged && state != "outside") cls += " flagged";
  if (!g.value("seen", false)) cls += " unseen";
  const auto& mig = g.value("mig", nlohmann::json());
  const std::string title =
      mig.is_object() ? fmt::format("GPU {} MIG {}", mig["gpu"].get<int>(), mig["device"].get<int>())
                      : fmt::format("GPU {}", g["id"].get<int>());
  std::string out = fmt::format(
      "<div class=\"tile {}\" id=\"gpu-{}\" data-gpu=\"{}\"><div class=\"gpu-id\">{}</div>"
      "<div class=\"gpu-name\">{}</div>",
      cls, g["id"].get<int>(), g["id"].get<int>(), title,
      html_escape(g.value("name", std::string())));
  if (busy)
    out += tile_job(g, now_ms, sampler);
  else if (state == "shared")
    out += tile_shards(g);
  else if (state == "outside")
    out += "<div class=\"state\">busy outside the queue</div>";
  else if (g.value("busy_without_job", false))
    out += "<div class=\"state warn busy-flag\">in use, no job</div>";
  else
    out += "<div class=\"state\">free</div>";
  if (state != "shared" && g.value("shards", nlohmann::json()).is_object())
    out += fmt::format("<div class=\"shards\">{} shards</div>", g["shards"]["total"].get<int>());
  out += outside_uses(g);
  out += fmt::format(
      "<div class=\"figures\">util {} &middot; mem {} / {} &middot; {} &middot; {}</div>",
      opt_num(g["util_percent"], "{:.0f}", "%"), opt_num(g["mem_used_mib"], "{:.0f}", ""),
      opt_num(g["mem_total_mib"], "{:.0f}", " MiB"), opt_num(g["power_w"], "{:.0f}", " W"),
      opt_num(g["temp_c"], "{:.0f}", " &deg;C"));
  std::vector<std::optional<double>> spark;
  for (const auto& v : g["spark"])
    spark.push_back(v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt);
  if (busy) out += svg_sparkline(spark, 100);
  return out + "</div>";
}

std::string queue_table(const nlohmann::json& s, int64_t now_ms) {
  if (s["running"].empty() && s["pending"].empty())
    return "<p class=\"meta\" id=\"queue\">The queue is empty.</p>";
  std::string out =
      "<table id=\"queue\"><tr><th>JobID</th><th>Name</th><th>User</th><th>St</th><th>Time</th>"
      "<th>GPUs</th><th>GPU ids / (Reason)</th></tr>";
  for (const auto& j : s["running"]) {
    int64_t elapsed = std::max<int64_t>(0, (now_ms - j["start_ms"].get<int64_t>()) / 1000);
    std::string ids;
    for (const auto& g : j["gpus"]) ids += (ids.empty() ? "" : ",") + std::to_string(g.get<int>());
    out += fmt::format(
        "<tr class=\"running\"><td>{}</td><td>{}</td><td>{}</td><td>R</td><td>{}</td>"
        "<td class=\"num\">{}</td><td>{}</td></tr>",
        job_link(j), html_escape(j["name"].get<std::string>()),
        html_escape(j["user"].get<std::string>()), squeue_time(elapsed),
        j["gpus_requested"].get<int>(), ids);
  }
  for (const auto& j : s["pending"])
    out += fmt::format(
        "<tr class=\"pending\"><td>{}</td><td>{}</td><td>{}</td><td>PD</td><td>0:00</td>"
        "<td class=\"num\">{}</td><td>({})</td></tr>",
        job_link(j), html_escape(j["name"].get<std::string>()),
        html_escape(j["user"].get<std::string>()), j["gpus_requested"].get<int>(),
        html_escape(j["reason"].get<std::string>()));
  out += "</table>";
  size_t shown = s["pending"].size(), total = s.value("pending_total", shown);
  if (total > shown) out += fmt::format("<p class=\"meta\">and {} more pending</p>", total - shown);
  return out;
}

std::string history_table(const nlohmann::json& recent) {
  std::string out =
      "<table id=\"history\"><tr><th>JobID</th><th>Name</th><th>User</th><th>State</th>"
      "<th>ExitCode</th><th>Elapsed</th><th>GPUs</th><th>GPU-hours</th><th>Mean util</th></tr>";
  for (const auto& j : recent)
    out += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{:.2f}</td><td class=\"num\">{}</td></tr>",
        job_link(j), html_escape(j["name"].get<std::string>()),
        html_escape(j["user"].get<std::string>()), html_escape(j["state"].get<std::string>()),
        exit_code_text(j["exit_code"].get<int>(), j["exit_signal"].get<int>()),
        sacct_elapsed(j["elapsed_s"].get<int64_t>()), j["gpus"].size(),
        j["gpu_hours"].get<double>(), opt_num(j["util_mean"], "{:.1f}", "%"));
  return out + "</table>";
}

std::string footer() {
  return "<footer>Read-only. <a href=\"/api/status\">/api/status</a> (JSON) &middot; "
         "<a href=\"/metrics\">/metrics</a> (Prometheus)</footer></body></html>";
}

}  // namespace

std::string html_escape(const std::string& text) {
  const std::string s = common::escape_control_keep_lines(text);  // <pre> blocks keep theirs
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_status_page(const nlohmann::json& s, int refresh_s) {
  const int64_t now = s["now_ms"].get<int64_t>();
  const std::string host = s["host"].get<std::string>();
  size_t busy = 0;
  for (const auto& g : s["gpus"]) busy += g["state"] == "busy" || g["state"] == "shared";
  const auto& smp = s["sampler"];
  std::string sampling =
      smp["interval_s"].get<int>() > 0
          ? fmt::format("sampled every {} s{}", smp["interval_s"].get<int>(),
                        smp["time_ms"].get<int64_t>()
                            ? " (" + html_escape(smp["source"].get<std::string>()) + ", last " +
                                  utc_time(smp["time_ms"].get<int64_t>()) + ")"
                            : "")
          : "sampling off";
  std::string out = head("gpuq on " + host, refresh_s);
  out += fmt::format(
      "<header><h1>gpuq on <span id=\"host\">{}</span></h1><p class=\"meta\">{} &middot; {} of {} "
      "GPUs busy &middot; {}{}</p>",
      html_escape(host), utc_time(now), busy, s["gpus"].size(), sampling,
      s.value("draining", false) ? " &middot; <b>draining</b>" : "");
  if (!smp["error"].get<std::string>().empty())
    out += fmt::format("<p class=\"err\">GPU sampling: {}</p>",
                       html_escape(smp["error"].get<std::string>()));
  out += "</header><section><h2>GPUs</h2><div id=\"gpus\" class=\"tiles\">";
  for (const auto& g : s["gpus"]) out += tile(g, now, smp);
  out += "</div></section><section><h2>Queue</h2>" + queue_table(s, now) + "</section>";
  out += budget_table(s.value("budgets", nlohmann::json::array()));
  out += "<section><h2>Recent jobs</h2>" + history_table(s["recent"]) + "</section>";
  return out + footer();
}

std::string render_job_page(const nlohmann::json& stats, int refresh_s) {
  const auto& j = stats["job"];
  const std::string id = j["display_id"].get<std::string>();
  const bool live = j["state"] == "RUNNING" || j["state"] == "PENDING";
  std::string out = head("gpuq job " + id, live ? refresh_s : 0);
  out += fmt::format(
      "<header><h1>Job <span id=\"job-id\">{}</span>: {}</h1><p class=\"meta\"><a href=\"/\">"
      "all GPUs</a></p></header><pre id=\"stats\">{}</pre>",
      html_escape(id), html_escape(j["name"].get<std::string>()), html_escape(format_stats(stats)));
  std::map<int, ChartSeries> util, mem;
  for (const auto& s : stats["samples"]) {
    int g = s[1].get<int>();
    auto value = [](const nlohmann::json& v) {
      return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
    };
    util[g].label = mem[g].label = fmt::format("GPU {}", g);
    util[g].points.push_back({s[0].get<int64_t>(), value(s[2])});
    mem[g].points.push_back({s[0].get<int64_t>(), value(s[3])});
  }
  auto values = [](const std::map<int, ChartSeries>& m) {
    std::vector<ChartSeries> v;
    for (const auto& [g, s] : m) v.push_back(s);
    return v;
  };
  if (util.empty()) {
    out += "<p class=\"meta\">No samples for this job (yet, or any more).</p>";
  } else {
    out += "<h2>GPU utilisation (%)</h2>" + svg_chart(values(util), "utilisation %", 100.0);
    out += "<h2>GPU memory used (MiB)</h2>" + svg_chart(values(mem), "memory MiB", std::nullopt);
  }
  return out + footer();
}

std::string render_array_page(const nlohmann::json& stats, int refresh_s) {
  const std::string id = stats.value("array", std::string());
  const auto& tasks = stats["tasks"];
  bool live = false;
  for (const auto& t : tasks) live = live || t["state"] == "RUNNING" || t["state"] == "PENDING";
  const size_t total = stats.value("tasks_total", tasks.size());
  std::string out = head("gpuq array job " + id, live ? refresh_s : 0);
  out += fmt::format(
      "<header><h1>Array job <span id=\"job-id\">{}</span>: {} tasks</h1><p class=\"meta\">"
      "<a href=\"/\">all GPUs</a></p></header>",
      html_escape(id), total);
  out += history_table(tasks);
  if (total > tasks.size())
    out += fmt::format("<p class=\"meta\">and {} more tasks</p>", total - tasks.size());
  return out + footer();
}

std::string render_error_page(int code, const std::string& title, const std::string& detail) {
  return head(fmt::format("{} {}", code, title), 0) +
         fmt::format("<h1>{} {}</h1><p>{}</p><p><a href=\"/\">gpuq status</a></p></body></html>",
                     code, html_escape(title), html_escape(detail));
}

}  // namespace gpurun::queue

// web_render.h: what `gpuq web` serves, as pure functions of the daemon's JSON replies: the status
// page (a tile per GPU, the queue, recent jobs), a job's page with SVG plots drawn here (no script,
// font or stylesheet is fetched from anywhere: clusters are offline), and the Prometheus text
// exposition of /metrics. Everything that comes from users (job names, user names, reasons) is
// HTML-escaped, or escaped as the exposition format requires.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpurun::queue {

// & < > " ' as entities, so text is safe both between tags and inside attribute values; control
// and bidi characters first written as common::escape_control_keep_lines writes them (a <pre>
// block keeps its lines).
std::string html_escape(const std::string& s);

// A small line chart of the last values (nullopt: a gap), scaled 0..y_max.
std::string svg_sparkline(const std::vector<std::optional<double>>& values, double y_max,
                          int width = 160, int height = 28);

struct ChartSeries {
  std::string label;
  std::vector<std::pair<int64_t, std::optional<double>>> points;  // (time ms, value)
};
// A line chart with time on x (UTC clock labels), value on y from 0 to y_max (or the largest
// value when y_max is nullopt), a legend, and one colour per series.
std::string svg_chart(const std::vector<ChartSeries>& series, const std::string& y_label,
                      std::optional<double> y_max, int width = 900, int height = 260);

// The page at / from a "status" reply; refreshes itself every refresh_s seconds.
std::string render_status_page(const nlohmann::json& status, int refresh_s);
// The page at /job/ID from a "stats" reply (samples downsampled by the daemon).
std::string render_job_page(const nlohmann::json& stats, int refresh_s);
// The page at /job/ARRAY_ID from a "stats" reply for an array: its tasks, each a link to its page.
std::string render_array_page(const nlohmann::json& stats, int refresh_s);
// A minimal page for errors (404, 405, a daemon that does not answer).
std::string render_error_page(int code, const std::string& title, const std::string& detail);

// /metrics from a "status" reply, in Prometheus' text exposition format (version 0.0.4).
std::string render_metrics(const nlohmann::json& status);

}  // namespace gpurun::queue

// SVG charts for gpuq's web pages (web_render.h): drawn on the server as plain SVG elements, so
// the page needs no script and works offline.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "gpurun/queue/web_render.h"

namespace gpurun::queue {
namespace {

constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};

// UTC clock time; with seconds when the chart spans less than 10 minutes.
std::string clock(int64_t ms, bool seconds) {
  time_t t = static_cast<time_t>(ms / 1000);
  tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  strftime(buf, sizeof(buf), seconds ? "%H:%M:%S" : "%H:%M", &tm);
  return buf;
}

std::string tick(double v) {
  return v >= 100 ? fmt::format("{:.0f}", v) : fmt::format("{:.3g}", v);
}

// Polylines through the points, broken where a value is missing.
std::string polylines(const std::vector<std::pair<double, std::optional<double>>>& xy,
                      const std::string& style) {
  std::string out, pts;
  auto flush = [&] {
    if (!pts.empty()) out += fmt::format("<polyline points=\"{}\" {}/>", pts, style);
    pts.clear();
  };
  for (const auto& [x, y] : xy) {
    if (!y) {
      flush();
      continue;
    }
    pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", x, *y);
  }
  flush();
  return out;
}

}  // namespace

std::string svg_sparkline(const std::vector<std::optional<double>>& values, double y_max, int width,
                          int height) {
  std::vector<std::pair<double, std::optional<double>>> xy;
  const double n = std::max<double>(1, static_cast<double>(values.size()) - 1);
  for (size_t i = 0; i < values.size(); ++i) {
    std::optional<double> y;
    if (values[i]) y = height - 2 - std::clamp(*values[i] / y_max, 0.0, 1.0) * (height - 4);
    xy.push_back({2 + i / n * (width - 4), y});
  }
  return fmt::format(
      "<svg class=\"spark\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" "
      "aria-label=\"utilisation over the last {2} samples\"><rect width=\"{0}\" height=\"{1}\" "
      "fill=\"#f4f6f8\"/>{3}</svg>",
      width, height, values.size(),
      polylines(xy, "fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\""));
}

std::string svg_chart(const std::vector<ChartSeries>& series, const std::string& y_label,
                      std::optional<double> y_max, int width, int height) {
  const int left = 74, right = 110, top = 10, bottom = 30;
  const double pw = width - left - right, ph = height - top - bottom;
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  double ymax = y_max.value_or(0);
  for (const auto& s : series)
    for (const auto& [t, v] : s.points) {
      t0 = std::min(t0, t);
      t1 = std::max(t1, t);
      if (!y_max && v) ymax = std::max(ymax, *v);
    }
  if (t0 > t1) t0 = t1 = 0;
  if (t1 == t0) t1 = t0 + 1000;
  if (ymax <= 0) ymax = 1;
  std::string out = fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" "
      "aria-label=\"{2}\"><rect x=\"{3}\" y=\"{4}\" width=\"{5}\" height=\"{6}\" fill=\"#fff\" "
      "stroke=\"#999\"/>",
      width, height, html_escape(y_label), left, top, pw, ph);
  for (int k = 0; k <= 4; ++k) {  // y grid and labels
    double y = top + ph - k * ph / 4;
    out += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e3e3e3\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\" font-size=\"11\">{5}</text>",
        left, left + pw, y, left - 4, y + 4, tick(ymax * k / 4));
  }
  for (int k = 0; k <= 4; ++k) {  // time labels
    double x = left + k * pw / 4;
    out +=
        fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
                    x, height - 10, clock(t0 + (t1 - t0) * k / 4, t1 - t0 < 600000));
  }
  out += fmt::format(
      "<text x=\"12\" y=\"{:.1f}\" font-size=\"11\" transform=\"rotate(-90 12 {:.1f})\" "
      "text-anchor=\"middle\">{}</text>",
      top + ph / 2, top + ph / 2, html_escape(y_label));
  for (size_t i = 0; i < series.size(); ++i) {
    const char* colour = kColours[i % std::size(kColours)];
    std::vector<std::pair<double, std::optional<double>>> xy;
    for (const auto& [t, v] : series[i].points) {
      std::optional<double> y;
      if (v) y = top + ph - std::clamp(*v / ymax, 0.0, 1.0) * ph;
      xy.push_back({left + static_cast<double>(t - t0) / static_cast<double>(t1 - t0) * pw, y});
    }
    out += polylines(xy, fmt::format("fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"", colour));
    out += fmt::format(
        "<rect x=\"{0}\" y=\"{1}\" width=\"12\" height=\"3\" fill=\"{2}\"/>"
        "<text x=\"{3}\" y=\"{4}\" font-size=\"12\">{5}</text>",
        width - right + 10, top + 10 + 18 * i, colour, width - right + 26, top + 15 + 18 * i,
        html_escape(series[i].label));
  }
  return out + "</svg>";
}

}  // namespace gpurun::queue

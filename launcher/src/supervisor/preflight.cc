// preflight.cc: --preflight's mode, size and slow-link rule (preflight.h).
#include "supervisor/preflight.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>

namespace gpurun::launcher {

std::optional<PreflightMode> parse_preflight_mode(std::string_view text) {
  if (text == "off") return PreflightMode::off;
  if (text == "warn") return PreflightMode::warn;
  if (text == "fail") return PreflightMode::fail;
  return std::nullopt;
}

std::vector<std::string> slow_links(const std::vector<LinkFigure>& links, double ratio) {
  std::vector<std::string> out;
  if (links.size() < 2) return out;  // one link is as fast as the others
  std::vector<double> v;
  for (const auto& l : links) v.push_back(l.mb_per_s);
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  for (const auto& l : links)
    if (l.mb_per_s < ratio * median)
      out.push_back(fmt::format(
          "node {}: its link to rank 0's node is far slower than the others: {:.0f} MB/s, under "
          "{:g} of the median {:.0f} MB/s",
          l.node, l.mb_per_s, ratio, median));
  return out;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p == text.data()) return std::nullopt;
  std::string_view unit(p, static_cast<std::size_t>(text.data() + text.size() - p));
  if (unit.size() > 1 && (unit.substr(1) == "B" || unit.substr(1) == "iB"))
    unit = unit.substr(0, 1);
  int shift = 0;
  if (unit.empty() || unit == "B")
    shift = 0;
  else if (unit == "K" || unit == "k")
    shift = 10;
  else if (unit == "M")
    shift = 20;
  else if (unit == "G")
    shift = 30;
  else if (unit == "T")
    shift = 40;
  else
    return std::nullopt;
  if (shift && n > (std::uint64_t{1} << (63 - shift))) return std::nullopt;
  return n << shift;
}

}  // namespace gpurun::launcher

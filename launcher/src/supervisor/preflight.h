// preflight.h: gpurun's side of --preflight (the node side: wrapper/node_checks.h): the mode, and
// the rule that names a link far slower than the others. Pure; tests/launcher/preflight_test.cc.
// Private to the gpurun binary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpurun::launcher {

// --preflight: off (no check), warn (a failing node is named and the job starts), fail (a failing
// node is named and no program starts). A check that cannot run is a warning in both.
enum class PreflightMode { off, warn, fail };
std::optional<PreflightMode> parse_preflight_mode(std::string_view text);

// One node's --preflight-bandwidth figure: its link to rank 0's node.
struct LinkFigure {
  std::string node;
  double mb_per_s;
};
// A link under `ratio` of the median of all figures is far slower than the others; one line for
// each (in the order given), saying its figure and the median. Needs two figures or more.
inline constexpr double kSlowLinkRatio = 0.25;
std::vector<std::string> slow_links(const std::vector<LinkFigure>& links,
                                    double ratio = kSlowLinkRatio);

// --preflight-min-tmp: bytes from "1G", "512M", "100K", "2T", "1024" (bytes), "0" (no check);
// binary units, an optional trailing "B" or "iB". nullopt for anything else.
std::optional<std::uint64_t> parse_size(std::string_view text);

}  // namespace gpurun::launcher

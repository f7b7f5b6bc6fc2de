// node_loss.cc: --nnodes MIN:MAX's rules (node_loss.h).
#include "supervisor/node_loss.h"

#include <fmt/format.h>

#include <algorithm>

namespace gpurun::launcher {

std::vector<LeftOut> failed_preflight_nodes(const Attempt& a) {
  std::vector<LeftOut> out;
  for (const Attempt::Rank& r : a.ranks()) {
    if (!r.preflight || r.preflight->failures.empty()) continue;
    std::string why = "failed its preflight: ";
    for (std::size_t i = 0; i < r.preflight->failures.size(); ++i)
      why += (i ? "; " : "") + r.preflight->failures[i];
    out.push_back({r.host, why});
  }
  return out;
}

std::optional<LeftOut> dead_node(const Attempt& a) {
  const auto& f = a.failure();
  if (!f || f->rank < 0 || !f->all_running || !f->died || a.hung() || f->host.empty())
    return std::nullopt;
  return LeftOut{f->host,
                 fmt::format("rank {} {}{}", f->rank, f->what,
                             f->seconds >= 0 ? fmt::format(" after {:.1f} s", f->seconds) : "")};
}

Allocation without_nodes(const Allocation& a, const std::vector<LeftOut>& out) {
  Allocation b = a;
  b.nodes.erase(std::remove_if(b.nodes.begin(), b.nodes.end(),
                               [&](const NodeAlloc& n) {
                                 return std::any_of(out.begin(), out.end(), [&](const LeftOut& l) {
                                   return l.host == n.host;
                                 });
                               }),
                b.nodes.end());
  return b;
}

std::optional<std::string> too_few_nodes(int left, const NodeRange& r) {
  if (left >= r.min) return std::nullopt;
  return fmt::format("{} node{} would be left, fewer than --nnodes {} allows", left,
                     left == 1 ? "" : "s", to_string(r));
}

std::string to_string(const NodeRange& r) {
  return r.min == r.max ? std::to_string(r.min) : fmt::format("{}:{}", r.min, r.max);
}

}  // namespace gpurun::launcher

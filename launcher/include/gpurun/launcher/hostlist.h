// hostlist.h: Slurm's hostlist and tasks-per-node syntax.
//
// Semantics are Slurm >= 23.02.5 (src/common/hostlist.c): text may follow ']' (n[1-2]-ib), several
// bracket groups multiply left-major (r[1-2]n[1-2]), a range's width comes from its low bound
// (n[009-11] -> n009 n010 n011), order is kept and nothing is de-duplicated. Stricter than Slurm
// where Slurm silently accepts nonsense: n[1-], a stray ']', blanks inside brackets are errors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpurun::launcher {

// Most hosts one expression may expand to; guards against "n[0-99999999]" eating memory.
inline constexpr std::size_t kMaxHostlistHosts = 1u << 20;

// Expands an expression such as "gpu[001-004],login1" (items split by ',' or blanks outside
// brackets). Throws HostlistError pointing at the offending character.
std::vector<std::string> expand_hostlist(std::string_view expr);

// The shortest bracket form that expand_hostlist() turns back into exactly `hosts`, in order.
// Throws HostlistError for a host that cannot be written in the syntax (contains [ ] , or blanks).
std::string compress_hostlist(const std::vector<std::string>& hosts);

// Expands Slurm's tasks-per-node / cpus-per-node syntax: "2(x3),1" -> {2, 2, 2, 1}.
std::vector<int> expand_tasks_per_node(std::string_view expr);

// The inverse, runs of equal counts written as N(xR).
std::string compress_tasks_per_node(const std::vector<int>& counts);

}  // namespace gpurun::launcher

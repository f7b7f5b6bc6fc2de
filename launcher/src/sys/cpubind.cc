// cpubind.cc: see cpubind.h.
#include "sys/cpubind.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <map>
#include <set>

#include "alloc/env_util.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/strings.h"
#include "gpurun/launcher/error.h"

namespace gpurun::launcher::cpubind {
namespace {

constexpr const char* kNvidiaGpus = "/proc/driver/nvidia/gpus";

using common::split;

// `cpus` cut into k contiguous shares: whole cores when there are enough, else single CPUs,
// else (fewer CPUs than ranks) one shared CPU each.
std::vector<std::vector<int>> share(const Topology& topo, const std::vector<int>& cpus,
                                    std::size_t k) {
  std::map<int, std::vector<int>> by_core;
  for (int c : cpus) by_core[topo.core_of(c)].push_back(c);
  std::vector<std::vector<int>> units;
  if (by_core.size() >= k) {
    for (auto& [core, threads] : by_core) units.push_back(threads);
  } else {
    for (int c : cpus) units.push_back({c});
  }
  std::vector<std::vector<int>> out(k);
  if (units.size() < k) {
    for (std::size_t i = 0; i < k; ++i) out[i] = units[i % units.size()];
    return out;
  }
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t u = i * units.size() / k; u < (i + 1) * units.size() / k; ++u)
      out[i].insert(out[i].end(), units[u].begin(), units[u].end());
  for (auto& s : out) std::sort(s.begin(), s.end());
  return out;
}

}  // namespace

Tree real_tree() {
  Tree t;
  t.read = [](const std::string& p) { return common::read_file(p); };
  t.list = [](const std::string& dir) {
    std::vector<std::string> out;
    for (std::string& name : common::list_dir(dir).value_or(std::vector<std::string>{}))
      if (name[0] != '.') out.push_back(std::move(name));
    return out;
  };
  return t;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<int> parse_cpulist(std::string_view text, const std::string& what) {
  std::string s = detail::trim(std::string(text));
  std::set<int> cpus;
  if (s.empty()) return {};
  auto bad = [&] {
    return Error(fmt::format("{} '{}': expected a CPU list such as 0-3,8,10-11", what, s));
  };
  for (const auto& item : split(s, ',')) {
    auto dash = item.find('-');
    std::string lo = item.substr(0, dash),
                hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
        hi.find_first_not_of("0123456789") != std::string::npos || lo.size() > 6 || hi.size() > 6)
      throw bad();
    int a = std::stoi(lo), b = std::stoi(hi);
    if (b < a) throw bad();
    for (int c = a; c <= b; ++c) cpus.insert(c);
  }
  return {cpus.begin(), cpus.end()};
}

std::string format_cpulist(const std::vector<int>& cpus) {
  return detail::format_ranges(cpus);
}

std::optional<std::string> gpu_pci_address(const Tree& t, const std::string& id) {
  std::vector<std::string> gpus = t.list(kNvidiaGpus);
  std::sort(gpus.begin(), gpus.end());  // PCI bus order, CUDA_DEVICE_ORDER=PCI_BUS_ID's
  if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) {
    std::size_t i = std::stoul(id);
    if (i < gpus.size()) return gpus[i];
    return std::nullopt;
  }
  if (id.rfind("GPU-", 0) != 0) return std::nullopt;  // MIG- instances: the driver file omits them
  for (const auto& g : gpus) {
    auto info = t.read(fmt::format("{}/{}/information", kNvidiaGpus, g));
    if (!info) continue;
    for (const auto& line : detail::split_lines(*info)) {
      auto colon = line.find(':');
      if (colon != std::string::npos && detail::trim(line.substr(0, colon)) == "GPU UUID" &&
          detail::trim(line.substr(colon + 1)) == id)
        return g;
    }
  }
  return std::nullopt;
}

std::vector<std::vector<int>> auto_binding(const Tree& t, const Topology& topo,
                                           const std::vector<int>& allowed,
                                           const std::vector<std::optional<std::string>>& gpus) {
  // Ranks grouped by the CPU set they draw from, in order of their local rank.
  std::map<std::vector<int>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    std::vector<int> set = allowed;
    std::optional<std::string> pci = gpus[i] ? gpu_pci_address(t, *gpus[i]) : std::nullopt;
    if (auto local = pci ? topo.pci_local_cpus(*pci) : std::nullopt) {
      std::vector<int> both;
      std::set_intersection(allowed.begin(), allowed.end(), local->begin(), local->end(),
                            std::back_inserter(both));
      if (!both.empty()) set = both;  // else the GPU's CPUs are not ours: use what is
    }
    groups[set].push_back(i);
  }
  std::vector<std::vector<int>> out(gpus.size());
  for (const auto& [set, ranks] : groups) {
    if (set.empty()) continue;
    auto shares = share(topo, set, ranks.size());
    for (std::size_t j = 0; j < ranks.size(); ++j) out[ranks[j]] = shares[j];
  }
  return out;
}

void check_spec(const std::string& spec) {
  if (spec == "none" || spec == "auto") return;
  for (const auto& l : split(spec, ':'))
    if (parse_cpulist(l, "--cpu-bind").empty())
      throw Error(
          fmt::format("--cpu-bind '{}': expected auto, none, or one CPU list per local "
                      "rank separated by ':' (e.g. 0-3:4-7)",
                      spec));
}

std::vector<std::vector<int>> binding(const std::string& spec, const Tree& t, const Topology* topo,
                                      const std::vector<int>& allowed,
                                      const std::vector<std::optional<std::string>>& gpus,
                                      const std::string& host) {
  if (spec == "none" || (spec == "auto" && !topo))
    return std::vector<std::vector<int>>(gpus.size());
  if (spec == "auto") return auto_binding(t, *topo, allowed, gpus);
  check_spec(spec);
  std::vector<std::string> lists = split(spec, ':');
  if (lists.size() < gpus.size())
    throw Error(fmt::format("--cpu-bind '{}' gives {} CPU list{} but {} runs {} ranks", spec,
                            lists.size(), lists.size() == 1 ? "" : "s", host, gpus.size()));
  std::vector<std::vector<int>> out;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    out.push_back(parse_cpulist(lists[i], "--cpu-bind"));
    for (int c : out.back())
      if (!std::binary_search(allowed.begin(), allowed.end(), c))
        throw Error(
            fmt::format("--cpu-bind: CPU {} of local rank {}'s list is not allowed on {} "
                        "(allowed: {})",
                        c, i, host, format_cpulist(allowed)));
  }
  return out;
}

}  // namespace gpurun::launcher::cpubind

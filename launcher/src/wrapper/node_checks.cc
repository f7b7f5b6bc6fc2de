// node_checks.cc: --preflight's checks of one node (node_checks.h): the job's GPUs and TMPDIR.
// The bandwidth exchange is in node_bandwidth.cc.
#include "wrapper/node_checks.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "gpurun/common/error.h"

namespace gpurun::launcher::node_checks {
namespace {

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string mib(std::uint64_t bytes) {
  return fmt::format("{} MiB", bytes >> 20);
}

// Whether a kept sample (monitor::keep_job_gpus: its index already the node's number) is `id`.
bool is(const gpuinfo::GpuSample& g, const std::string& id) {
  return g.uuid == id || (g.mig < 0 && std::to_string(g.index) == id);
}

}  // namespace

std::vector<std::string> gpu_failures(const gpuinfo::HealthReport& health,
                                      const monitor::JobGpus& job) {
  std::vector<std::string> out;
  // The health rows as a snapshot, so the monitor's matching (indices, UUIDs, a device cgroup's
  // own numbering) decides which rows are the job's GPUs.
  gpuinfo::GpuSnapshot s;
  std::vector<std::string> listed;
  for (std::size_t row = 0; row < health.gpus.size(); ++row) {
    const auto& h = health.gpus[row];
    gpuinfo::GpuSample g;
    g.index = h.index;
    g.uuid = h.uuid;
    g.name = std::to_string(row);  // the health row it came from, wherever keep_job_gpus puts it
    s.gpus.push_back(g);
    listed.push_back(std::to_string(h.index));
  }
  s.problems = health.problems;
  monitor::JobGpus physical = job;  // MIG devices are not in the health rows
  physical.ids.clear();
  physical.owner.clear();
  for (std::size_t i = 0; i < job.ids.size(); ++i)
    if (job.ids[i].rfind("MIG-", 0) != 0) {
      physical.ids.push_back(job.ids[i]);
      physical.owner.push_back(job.owner[i]);
    }
  if (physical.ids.empty()) physical.visible.clear();
  std::vector<int> owners = monitor::keep_job_gpus(s, physical);
  std::vector<std::string> missing;
  for (const auto& id : physical.ids) {
    bool found = false;
    for (const auto& g : s.gpus) found = found || is(g, id);
    if (!found) missing.push_back(id);
  }
  if (!missing.empty())
    out.push_back(fmt::format(
        "GPU count differs from the plan: {} GPU{} planned here, {} found (missing: {}; {} "
        "lists {})",
        physical.ids.size(), physical.ids.size() == 1 ? "" : "s",
        physical.ids.size() - missing.size(), joined(missing, ", "),
        health.source.rfind("nvml", 0) == 0 ? "NVML" : "nvidia-smi",
        listed.empty() ? "none" : joined(listed, ",")));
  for (const auto& p : health.problems) out.push_back("the driver cannot read a GPU: " + p);
  for (std::size_t k = 0; k < s.gpus.size(); ++k) {
    const auto& g = s.gpus[k];
    const auto& h = health.gpus[std::stoul(g.name)];
    std::string who = owners[k] >= 0 ? fmt::format("GPU {} (rank {})", g.index, owners[k])
                                     : fmt::format("GPU {}", g.index);
    for (const auto& f : gpuinfo::health_faults(h)) out.push_back(who + ": " + f);
  }
  return out;
}

std::optional<std::string> tmp_failure(const std::string& dir,
                                       std::optional<std::uint64_t> free_bytes,
                                       std::uint64_t min_bytes, const std::string& why) {
  if (min_bytes == 0) return std::nullopt;
  if (!free_bytes)
    return fmt::format("TMPDIR {}: cannot read its free space: {} (set TMPDIR?)", dir, why);
  if (*free_bytes >= min_bytes) return std::nullopt;
  return fmt::format("TMPDIR {} has {} free, under the {} --preflight-min-tmp asks", dir,
                     mib(*free_bytes), mib(min_bytes));
}

Result check_node(const gpuinfo::SamplerConfig& cfg, const monitor::JobGpus& job, bool any_gpu,
                  const std::string& tmp_dir, std::uint64_t min_tmp) {
  Result r;
  if (any_gpu) {
    try {
      r.failures = gpu_failures(gpuinfo::read_gpu_health(cfg), job);
    } catch (const common::Error& e) {
      r.notes.push_back(fmt::format("GPUs not checked: {}", e.what()));
    }
  }
  if (min_tmp > 0) {
    struct statvfs st {};
    std::optional<std::uint64_t> free;
    std::string why;
    if (statvfs(tmp_dir.c_str(), &st) == 0)
      free = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
    else
      why = strerror(errno);
    if (auto f = tmp_failure(tmp_dir, free, min_tmp, why)) r.failures.push_back(*f);
  }
  return r;
}

}  // namespace gpurun::launcher::node_checks

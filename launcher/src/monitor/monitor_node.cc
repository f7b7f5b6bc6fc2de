// monitor_node.cc: the node's side of --monitor (monitor.h): which sampled GPUs are the job's, and
// the sampling thread in local rank 0's wrapper.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "monitor/monitor.h"

namespace gpurun::launcher::monitor {
namespace {

bool names(const std::string& id, const gpuinfo::GpuSample& g) {
  if (id == g.uuid) return true;
  return g.mig < 0 && id == std::to_string(g.index);
}

std::string joined_ids(const gpuinfo::GpuSnapshot& s) {
  std::string out;
  for (const auto& g : s.gpus)
    out += (out.empty() ? "" : ",") + (g.mig < 0 ? std::to_string(g.index) : g.uuid);
  return out.empty() ? "none" : out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// The node's list as GPU indices, sorted; empty when any entry is not one (a UUID).
std::vector<int> sorted_indices(const std::vector<std::string>& ids) {
  std::vector<int> out;
  for (const auto& id : ids) {
    if (id.empty() || id.size() > 6 || id.find_first_not_of("0123456789") != std::string::npos)
      return {};
    out.push_back(std::stoi(id));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Each index of `visible` to the number the sampler gives that GPU, when the sampler sees the
// job's cgroup and the list holds the node's numbers (monitor.h); empty when the numbers agree.
std::map<std::string, int> cgroup_numbers(const gpuinfo::GpuSnapshot& s,
                                          const std::vector<std::string>& visible) {
  std::vector<int> wanted = sorted_indices(visible), listed;
  for (const auto& g : s.gpus)
    if (g.mig < 0) listed.push_back(g.index);
  std::sort(listed.begin(), listed.end());
  // A driver that lost GPUs also lists fewer: no renumbering is guessed then.
  bool renumbered =
      s.problems.empty() && !wanted.empty() && listed.size() == wanted.size() && wanted != listed;
  for (std::size_t k = 0; renumbered && k < listed.size(); ++k)
    renumbered = listed[k] == static_cast<int>(k) && (k == 0 || wanted[k] != wanted[k - 1]);
  std::map<std::string, int> out;
  for (std::size_t k = 0; renumbered && k < wanted.size(); ++k)
    out[std::to_string(wanted[k])] = static_cast<int>(k);
  return out;
}

}  // namespace

JobGpus job_gpus(const RankPlan& plan, int node_rank, const std::vector<std::string>& visible) {
  JobGpus out;
  for (const auto& r : plan.ranks) {
    if (r.node_rank != node_rank) continue;
    for (int pos : r.gpus) {
      if (pos < 0 || static_cast<std::size_t>(pos) >= visible.size()) continue;
      out.ids.push_back(visible[static_cast<std::size_t>(pos)]);
      out.owner.push_back(r.rank);
    }
  }
  if (out.ids.empty()) {  // ranks without GPUs: the node's visible ones are still the job's
    out.ids = visible;
    out.owner.assign(visible.size(), -1);
  }
  out.visible = visible;
  return out;
}

std::vector<int> keep_job_gpus(gpuinfo::GpuSnapshot& s, const JobGpus& job) {
  std::vector<int> owners;
  if (job.ids.empty()) {
    owners.assign(s.gpus.size(), -1);
    return owners;
  }
  const std::map<std::string, int> renumbered = cgroup_numbers(s, job.visible);
  std::vector<std::string> as_listed = job.ids;  // each of the job's GPUs as the sampler names it
  for (auto& id : as_listed)
    if (auto r = renumbered.find(id); r != renumbered.end()) id = std::to_string(r->second);
  const std::string listed = joined_ids(s);
  std::vector<gpuinfo::GpuSample> kept;
  std::vector<bool> found(job.ids.size(), false);
  for (auto& g : s.gpus) {
    for (std::size_t i = 0; i < job.ids.size(); ++i) {
      if (!names(as_listed[i], g)) continue;
      if (as_listed[i] != job.ids[i]) g.index = std::stoi(job.ids[i]);
      found[i] = true;
      kept.push_back(std::move(g));
      owners.push_back(job.owner[i]);
      break;
    }
  }
  s.gpus = std::move(kept);
  for (std::size_t i = 0; i < job.ids.size(); ++i)
    if (!found[i])
      s.problems.push_back(fmt::format("GPU {} of the job is not among the GPUs listed here ({})",
                                       job.ids[i], listed));
  return owners;
}

NodeSampler::NodeSampler(gpuinfo::SamplerConfig cfg, int interval_ms, JobGpus job)
    : job_(std::move(job)),
      cfg_(std::move(cfg)),
      thread_(std::chrono::milliseconds(interval_ms), [this] { return tick(); }) {}

std::vector<control::ToSupervisor> NodeSampler::take() {
  thread_.drain();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<control::ToSupervisor> out(out_.begin(), out_.end());
  out_.clear();
  return out;
}

void NodeSampler::push(control::ToSupervisor m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (out_.size() >= 1000) out_.pop_front();  // an event loop that stalls must not grow this
    out_.push_back(std::move(m));
  }
  thread_.notify();
}

bool NodeSampler::tick() {
  if (!sampler_) {
    cfg_.cancel_fd = thread_.stopping_fd();  // stop() kills an nvidia-smi under way
    try {
      sampler_.emplace(std::move(cfg_));
    } catch (const std::exception& e) {
      push(control::GpuSamplesFailed{control::Text{e.what()}});
      return false;
    }
  }
  const bool ok = sample_once(*sampler_);
  ever_ok_ = ever_ok_ || ok;
  return ever_ok_;  // nothing to sample here: said once, and the job runs on
}

// One sample, filtered to the job's GPUs and queued; false when it failed.
bool NodeSampler::sample_once(gpuinfo::GpuSampler& sampler) {
  gpuinfo::GpuSnapshot s;
  try {
    s = sampler.sample();
  } catch (const std::exception& e) {
    if (thread_.stopping()) return ever_ok_;  // cut short by stop(): not a failure
    if (!failed_once_)
      push(control::GpuSamplesFailed{
          control::Text{fmt::format("{} ({})", e.what(), sampler.backend())}});
    failed_once_ = true;
    return false;
  }
  std::size_t listed = s.gpus.size();
  bool driver_said = !s.problems.empty();  // GPUs lost: not this filter's doing
  std::string ids = joined_ids(s);
  std::vector<int> owners = keep_job_gpus(s, job_);
  if (listed > 0 && s.gpus.empty() && !driver_said) {
    push(control::GpuSamplesFailed{control::Text{
        fmt::format("none of the GPUs {} lists ({}) is one of the job's on this node ({})",
                    sampler.backend(), ids, joined(job_.ids))}});
    return false;
  }
  std::string ranks;
  for (int r : owners) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  push(control::GpuSamples{ranks.empty() ? "-" : ranks, control::Text{gpuinfo::encode_snapshot(s)}});
  return true;
}

}  // namespace gpurun::launcher::monitor

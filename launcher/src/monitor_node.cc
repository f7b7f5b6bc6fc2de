// monitor_node.cc: the node's side of --monitor (monitor.h): which sampled GPUs are the job's, and
// the sampling thread in local rank 0's wrapper.
#include <fmt/format.h>

#include <chrono>

#include "monitor.h"

namespace gpurun::launcher::monitor {
namespace {

bool names(const std::string& id, const GpuSample& g) {
  if (id == g.uuid) return true;
  return g.mig < 0 && id == std::to_string(g.index);
}

std::string joined_ids(const GpuSnapshot& s) {
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
  return out;
}

std::vector<int> keep_job_gpus(GpuSnapshot& s, const JobGpus& job) {
  std::vector<int> owners;
  if (job.ids.empty()) {
    owners.assign(s.gpus.size(), -1);
    return owners;
  }
  std::vector<GpuSample> kept;
  for (auto& g : s.gpus) {
    for (std::size_t i = 0; i < job.ids.size(); ++i) {
      if (!names(job.ids[i], g)) continue;
      kept.push_back(std::move(g));
      owners.push_back(job.owner[i]);
      break;
    }
  }
  s.gpus = std::move(kept);
  return owners;
}

NodeSampler::NodeSampler(SamplerConfig cfg, int interval_ms, JobGpus job)
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
bool NodeSampler::sample_once(GpuSampler& sampler) {
  GpuSnapshot s;
  try {
    s = sampler.sample();
  } catch (const std::exception& e) {
    if (!failed_once_)
      push(control::GpuSamplesFailed{
          control::Text{fmt::format("{} ({})", e.what(), sampler.backend())}});
    failed_once_ = true;
    return false;
  }
  std::size_t listed = s.gpus.size();
  std::string ids = joined_ids(s);
  std::vector<int> owners = keep_job_gpus(s, job_);
  if (listed > 0 && s.gpus.empty() && s.problems.empty()) {
    push(control::GpuSamplesFailed{control::Text{
        fmt::format("none of the GPUs {} lists ({}) is one of the job's on this node ({})",
                    sampler.backend(), ids, joined(job_.ids))}});
    return false;
  }
  std::string ranks;
  for (int r : owners) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  push(control::GpuSamples{ranks.empty() ? "-" : ranks, control::Text{encode_snapshot(s)}});
  return true;
}

}  // namespace gpurun::launcher::monitor

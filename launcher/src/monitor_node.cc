// monitor_node.cc: the node's side of --monitor (monitor.h): which sampled GPUs are the job's, and
// the sampling thread in local rank 0's wrapper.
#include <fmt/format.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cstring>

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
    : interval_ms_(interval_ms),
      job_(std::move(job)),
      event_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!event_) throw Error(fmt::format("--monitor: eventfd: {}", strerror(errno)));
  // Signals stay with the wrapper's event loop: the thread starts with all of them blocked.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this, c = std::move(cfg)]() mutable { loop(std::move(c)); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

NodeSampler::~NodeSampler() {
  stop();
}

void NodeSampler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<control::ToSupervisor> NodeSampler::take() {
  uint64_t n;
  while (::read(event_.get(), &n, sizeof n) > 0) {
  }
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
  uint64_t one = 1;
  (void)!::write(event_.get(), &one, sizeof one);
}

// One sample, filtered to the job's GPUs and queued; false when sampling should stop.
bool NodeSampler::sample_once(GpuSampler& sampler, bool& failed_once) {
  GpuSnapshot s;
  try {
    s = sampler.sample();
  } catch (const std::exception& e) {
    if (!failed_once)
      push(control::GpuSamplesFailed{
          control::Text{fmt::format("{} ({})", e.what(), sampler.backend())}});
    failed_once = true;
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

void NodeSampler::loop(SamplerConfig cfg) {
  std::optional<GpuSampler> sampler;
  try {
    sampler.emplace(std::move(cfg));
  } catch (const std::exception& e) {
    push(control::GpuSamplesFailed{control::Text{e.what()}});
    return;
  }
  bool ever_ok = false, failed_once = false;
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    bool ok = sample_once(*sampler, failed_once);
    ever_ok = ever_ok || ok;
    lock.lock();
    if (!ok && !ever_ok) return;  // nothing to sample here: say so once, and let the job run
    // A steady period: the next sample is due one interval after the last was due.
    next += std::chrono::milliseconds(interval_ms_);
    auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;
    cv_.wait_until(lock, next, [this] { return stop_; });
  }
}

}  // namespace gpurun::launcher::monitor

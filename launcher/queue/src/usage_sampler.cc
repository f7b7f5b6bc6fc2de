// usage_sampler.cc: see usage_sampler.h.
#include "usage_sampler.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>

#include "gpurun/common/posix.h"
#include "runfiles.h"

namespace gpurun::queue {
namespace {
constexpr size_t kMaxWaitingTicks = 64;  // a stalled daemon loop must not make the thread hoard
}

UsageSampler::UsageSampler(launcher::SamplerConfig cfg, int interval_s)
    : interval_s_(interval_s), event_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!event_) throw std::runtime_error("eventfd failed");
  own_cgroup_ = launcher::process_cgroup(getpid());
  thread_ = std::thread([this, cfg] { loop(cfg); });
}

UsageSampler::~UsageSampler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void UsageSampler::set_targets(std::vector<Target> targets) {
  std::lock_guard<std::mutex> lock(mu_);
  targets_ = std::move(targets);
}

std::vector<UsageSampler::Tick> UsageSampler::take() {
  uint64_t n = 0;
  ssize_t ignored = ::read(event_.get(), &n, sizeof(n));  // clears the counter
  (void)ignored;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Tick> out(std::make_move_iterator(ticks_.begin()),
                        std::make_move_iterator(ticks_.end()));
  ticks_.clear();
  return out;
}

UsageSampler::Tick UsageSampler::sample_once(launcher::GpuSampler* gpus,
                                             const std::string& gpu_error,
                                             const std::vector<Target>& targets) const {
  Tick t;
  t.time_ms = now_ms();
  t.error = gpu_error;
  if (gpus) {
    try {
      t.gpus = gpus->sample();
    } catch (const std::exception& e) {
      t.error = e.what();
    }
  }
  if (targets.empty()) return t;
  auto procs = launcher::scan_processes();
  for (const auto& target : targets) {
    // A job in a cgroup of its own (a systemd scope, a cgroup-aware wrapper) is measured there:
    // the kernel's figures include processes that left the session.
    auto cg = launcher::process_cgroup(target.session);
    std::optional<launcher::ProcessUsage> u;
    if (cg && cg != own_cgroup_) u = launcher::cgroup_usage(*cg, common::read_file);
    t.jobs[target.job_id] = u ? *u : launcher::session_usage(procs, target.session);
  }
  return t;
}

void UsageSampler::loop(launcher::SamplerConfig cfg) {
  std::optional<launcher::GpuSampler> gpus;
  std::string gpu_error;
  try {
    gpus.emplace(std::move(cfg));
  } catch (const std::exception& e) {
    gpu_error = e.what();
  }
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    std::vector<Target> targets = targets_;
    lock.unlock();
    Tick t = sample_once(gpus ? &*gpus : nullptr, gpu_error, targets);
    lock.lock();
    if (ticks_.size() >= kMaxWaitingTicks) ticks_.pop_front();
    ticks_.push_back(std::move(t));
    uint64_t one = 1;
    ssize_t ignored = ::write(event_.get(), &one, sizeof(one));
    (void)ignored;
    cv_.wait_for(lock, std::chrono::seconds(interval_s_), [this] { return stop_; });
  }
}

}  // namespace gpurun::queue

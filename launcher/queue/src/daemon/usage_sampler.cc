// usage_sampler.cc: see usage_sampler.h.
#include "daemon/usage_sampler.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "gpurun/common/posix.h"
#include "supervise/runfiles.h"

namespace gpurun::queue {
namespace {
constexpr size_t kMaxWaitingTicks = 64;  // a stalled daemon loop must not make the thread hoard

std::string user_name(uid_t uid) {
  const auto pw = common::passwd_entry(uid);
  return pw ? pw->name : std::to_string(uid);
}

std::string command_of(int pid) {
  auto comm = common::read_file("/proc/" + std::to_string(pid) + "/comm");
  std::string c = comm ? *comm : "";
  while (!c.empty() && c.back() == '\n') c.pop_back();
  return c;
}

}  // namespace

UsageSampler::UsageSampler(gpuinfo::SamplerConfig cfg, int interval_s)
    : own_cgroup_(gpuinfo::process_cgroup(getpid())),
      cfg_(std::move(cfg)),
      thread_(std::chrono::seconds(interval_s), [this] { return tick(); }) {}

void UsageSampler::set_targets(std::vector<Target> targets) {
  std::lock_guard<std::mutex> lock(mu_);
  targets_ = std::move(targets);
}

std::vector<UsageSampler::Tick> UsageSampler::take() {
  thread_.drain();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Tick> out(std::make_move_iterator(ticks_.begin()),
                        std::make_move_iterator(ticks_.end()));
  ticks_.clear();
  return out;
}

UsageSampler::Tick UsageSampler::sample_once(const std::vector<Target>& targets) {
  Tick t;
  t.time_ms = now_ms();
  t.error = gpu_error_;
  if (gpus_) {
    try {
      t.gpus = gpus_->sample();
    } catch (const std::exception& e) {
      t.error = e.what();
    }
  }
  std::map<int64_t, std::string> own_cgroups;  // targets in a cgroup of their own
  if (!targets.empty()) {
    auto procs = gpuinfo::scan_processes();
    for (const auto& target : targets) {
      // A job in a cgroup of its own (a systemd scope, a cgroup-aware wrapper) is measured there:
      // the kernel's figures include processes that left the session.
      auto cg = gpuinfo::process_cgroup(target.session);
      std::optional<gpuinfo::ProcessUsage> u;
      if (cg && cg != own_cgroup_) {
        own_cgroups[target.job_id] = *cg;
        u = gpuinfo::cgroup_usage(*cg, common::read_file);
      }
      t.jobs[target.job_id] = u ? *u : gpuinfo::session_usage(procs, target.session);
    }
  }
  if (t.gpus && t.gpus->processes_read)
    t.gpu_uses = attribute(t.gpus->processes, targets, own_cgroups);
  return t;
}

std::vector<UsageSampler::GpuUse> UsageSampler::attribute(
    const std::vector<gpuinfo::GpuProcess>& processes, const std::vector<Target>& targets,
    const std::map<int64_t, std::string>& target_cgroups) const {
  std::vector<GpuUse> out;
  for (const auto& p : processes) {
    GpuUse u;
    u.process = p;
    struct stat st;
    if (::stat(("/proc/" + std::to_string(p.pid)).c_str(), &st) == 0) {
      u.uid = st.st_uid;
      u.user = user_name(st.st_uid);
      u.command = command_of(p.pid);
    }
    auto ps = gpuinfo::read_proc_stat(p.pid);
    for (const auto& target : targets)
      if (ps && ps->sid == target.session) u.job_id = target.job_id;
    auto cg = u.job_id ? std::nullopt : gpuinfo::process_cgroup(p.pid);
    for (const auto& [job, dir] : target_cgroups)
      if (cg && *cg == dir) u.job_id = job;
    out.push_back(std::move(u));
  }
  return out;
}

bool UsageSampler::tick() {
  if (!started_) {
    started_ = true;
    cfg_.cancel_fd = thread_.stopping_fd();  // the daemon's stop kills an nvidia-smi under way
    try {
      gpus_.emplace(std::move(cfg_));
    } catch (const std::exception& e) {
      gpu_error_ = e.what();
    }
  }
  std::vector<Target> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    targets = targets_;
  }
  Tick t = sample_once(targets);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ticks_.size() >= kMaxWaitingTicks) ticks_.pop_front();
    ticks_.push_back(std::move(t));
  }
  thread_.notify();
  return true;
}

}  // namespace gpurun::queue

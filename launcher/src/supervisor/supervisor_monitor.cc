// supervisor_monitor.cc: the Supervisor's part of --monitor (supervisor.h, monitor.h): samples
// from each node's local rank 0 into FILE.csv, a node that cannot be sampled said once, and the
// summary at the end. Monitoring never fails the job: a file that can no longer be written is
// said once and left.
#include <fmt/format.h>

#include <algorithm>

#include "supervisor/supervisor.h"

namespace gpurun::launcher {

void Supervisor::on_message(const From& c, const control::GpuSamples& m) {
  if (!monitor_) return;
  const std::string& node = attempt_.rank(c.rank).host;
  std::vector<std::string> problems;
  try {
    problems = monitor_->add(node, m);
  } catch (const Error& e) {
    tell(fmt::format("monitor: {}; no more samples are written", e.what()));
    monitor_.reset();
  }
  // A GPU lost or not found is said once, not every interval (and a flood of new ones is capped).
  for (const auto& p : problems) {
    std::string line = fmt::format("monitor: {}: {}", node, p);
    if (monitor_failures_.size() < kMaxMonitorLines && first_monitor_failure(line)) tell(line);
  }
}

bool Supervisor::first_monitor_failure(const std::string& what) {
  if (std::find(monitor_failures_.begin(), monitor_failures_.end(), what) !=
      monitor_failures_.end())
    return false;
  monitor_failures_.push_back(what);
  return true;
}

void Supervisor::on_message(const From& c, const control::GpuSamplesFailed& m) {
  const std::string& node = attempt_.rank(c.rank).host;
  if (std::find(monitor_silent_.begin(), monitor_silent_.end(), node) == monitor_silent_.end())
    monitor_silent_.push_back(node);
  // Every node lacking nvidia-smi says the same: once is enough.
  if (!first_monitor_failure(m.what.value)) return;
  tell(fmt::format("monitor: cannot sample the GPUs of {}: {}; the job goes on without them", node,
                   m.what.value));
}

void Supervisor::monitor_summary() {
  if (!cfg_.monitor_file) return;
  if (monitor_) {
    say(fmt::format("monitor: {} row{} in {} (every {} s)", monitor_->rows(),
                    monitor_->rows() == 1 ? "" : "s", monitor_->path(), cfg_.monitor_interval));
    std::vector<std::string> hosts;
    for (const auto& n : cfg_.plan.nodes) hosts.push_back(n.host);
    for (const auto& line : monitor_->summary(hosts))
      if (line.rfind("likely straggler", 0) == 0)
        tell("monitor: " + line);
      else
        say("monitor: " + line);
  }
  if (!monitor_silent_.empty()) {
    std::string nodes;
    for (const auto& n : monitor_silent_) nodes += (nodes.empty() ? "" : ", ") + n;
    say(fmt::format("monitor: no GPU samples from {} (said above)", nodes));
  }
}

}  // namespace gpurun::launcher

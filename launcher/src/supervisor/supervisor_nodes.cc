// supervisor_nodes.cc: the Supervisor's part of --nnodes MIN:MAX (supervisor.h): leaving nodes
// out of the next attempt, planning it on the rest (WORLD_SIZE and the rank table recomputed,
// srun told --exclude), and the final lines that say what was left out and why. Which nodes to
// leave out is node_loss.h's rule.
#include <fmt/format.h>

#include "gpurun/launcher/error.h"
#include "gpurun/launcher/hostlist.h"
#include "supervisor/supervisor.h"

namespace gpurun::launcher {
namespace {

std::string hosts_of(const std::vector<LeftOut>& nodes) {
  std::vector<std::string> hosts;
  for (const auto& n : nodes) hosts.push_back(n.host);
  return compress_hostlist(hosts);
}

}  // namespace

// After an attempt whose preflight failed on some nodes (--nnodes, --preflight fail): the next
// one goes on without them. It is no restart (no program ran): GPURUN_RESTART_COUNT stays.
bool Supervisor::restart_without_preflight_failures() {
  if (preflight_left_out_.empty() || forwarded_stop_signal_) return false;
  std::vector<LeftOut> nodes = std::move(preflight_left_out_);
  preflight_left_out_.clear();
  if (!leave_out(nodes)) return false;
  tell(fmt::format("starting {} rank{} on the other {} node{}, without {} (--nnodes {})", world_,
                   world_ == 1 ? "" : "s", cfg_.plan.nodes.size(),
                   cfg_.plan.nodes.size() == 1 ? "" : "s", hosts_of(nodes),
                   to_string(*cfg_.plan_options.nnodes)));
  return true;
}

// Plans the next attempt without `nodes`; false, saying why, when it cannot be: fewer than
// --nnodes MIN would be left, or the rest cannot hold the plan (--gpus-per-rank, ...).
bool Supervisor::leave_out(const std::vector<LeftOut>& nodes) {
  Allocation a = without_nodes(cfg_.alloc, nodes);
  const NodeRange& range = *cfg_.plan_options.nnodes;
  std::optional<std::string> refused = too_few_nodes(static_cast<int>(a.nodes.size()), range);
  RankPlan plan;
  if (!refused) {
    try {
      plan = make_plan(a, cfg_.plan_options);
    } catch (const Error& e) {
      refused = e.what();
    }
  }
  if (refused) {
    tell(fmt::format("cannot leave {} out: {}", hosts_of(nodes), *refused));
    return false;
  }
  // The rendezvous port stays; the address follows rank 0's node unless --master-addr set it.
  plan.master_port = cfg_.plan.master_port;
  if (cfg_.plan.master_addr != cfg_.plan.nodes.front().host)
    plan.master_addr = cfg_.plan.master_addr;
  cfg_.alloc = std::move(a);
  cfg_.plan = std::move(plan);
  world_ = cfg_.plan.world_size;
  hostfile_.reset();  // SLURM_HOSTFILE names the old plan's hosts
  for (const auto& n : nodes) {
    left_out_.push_back(n);
    cfg_.launch.exclude_hosts.push_back(n.host);
  }
  return true;
}

// The final lines: each node left out and why, and what the last attempt ran on.
void Supervisor::report_left_out() const {
  if (left_out_.empty()) return;
  const std::string range = to_string(*cfg_.plan_options.nnodes);
  for (const auto& l : left_out_)
    tell(fmt::format("--nnodes {}: node {} was left out: {}", range, l.host, l.why));
  tell(
      fmt::format("--nnodes {}: the last attempt ran on {} of {} nodes with WORLD_SIZE {} (the "
                  "first had {})",
                  range, cfg_.plan.nodes.size(), first_nodes_, world_, first_world_));
}

}  // namespace gpurun::launcher

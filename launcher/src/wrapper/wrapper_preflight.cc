// wrapper_preflight.cc: the rank wrapper's part of --preflight (wrapper.h): rank 0 serves the
// bandwidth exchange; each node's local rank 0 checks its node (node_checks.h) when the
// RENDEZVOUS asks, and reports before its reach check.
#include <fmt/format.h>

#include "alloc/env_util.h"
#include "wrapper/wrapper.h"

namespace gpurun::launcher {
namespace {

// For the whole exchange of one node, its wait for its turn at rank 0 included.
constexpr double kBandwidthTimeout = 60;

std::string lines(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : "\n") + s;
  return out;
}

}  // namespace

// The port rank 0 serves the exchange on; 0 when it cannot (the other nodes then note that
// their figure was not measured).
int RankWrapper::serve_bandwidth() {
  try {
    bandwidth_ = std::make_unique<node_checks::BandwidthServer>();
    return bandwidth_->port();
  } catch (const Error& e) {
    fmt::print(stderr, "gpurun: rank 0: --preflight-bandwidth: {}\n", e.what());
    return 0;
  }
}

void RankWrapper::run_preflight(const control::Rendezvous& m) {
  preflight_done_ = true;
  bool any_gpu = false;  // a node whose ranks were given no GPU passes the GPU checks
  for (const auto& r : plan_.plan.ranks)
    any_gpu = any_gpu || (r.node_rank == me_.node_rank && !r.gpus.empty());
  gpuinfo::SamplerConfig cfg;
  if (auto smi = env_.find("GPURUN_NVIDIA_SMI"); smi != env_.end()) cfg.nvidia_smi = smi->second;
  const std::string dir = detail::temp_dir(env_);
  node_checks::Result r = node_checks::check_node(
      cfg, monitor::job_gpus(plan_.plan, me_.node_rank, visible_), any_gpu, dir,
      static_cast<std::uint64_t>(std::max<std::int64_t>(m.min_tmp, 0)));
  if (m.bw_port > 0 && me_.node_rank != plan_.plan.ranks.at(0).node_rank) {
    try {
      r.mb_per_s = node_checks::measure_bandwidth(plan_.plan.master_addr, m.bw_port,
                                                  node_checks::kBandwidthBytes, kBandwidthTimeout);
    } catch (const Error& e) {
      r.notes.push_back(fmt::format("bandwidth to rank 0's node not measured: {}", e.what()));
    }
  }
  report(control::Preflight{lines(r.failures), r.mb_per_s, control::Text{lines(r.notes)}});
}

}  // namespace gpurun::launcher

// supervisor_preflight.cc: the Supervisor's part of --preflight (supervisor.h): which ranks check
// their node, what the RENDEZVOUS asks of them, and, once every node reported, one line per
// failing node and either GO or the refusal (--preflight fail). Attempt keeps the reports and
// decides when GO is due; the node's checks are wrapper/node_checks.h's.
#include <fmt/format.h>

#include "supervisor/supervisor.h"
#include "wrapper/node_checks.h"

namespace gpurun::launcher {
namespace {

constexpr int kPreflightStatus = 1;  // gpurun's exit status when --preflight fail refuses GO

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t b = 0;
  while (b < text.size()) {
    std::size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    if (e > b) out.push_back(text.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : "; ") + s;
  return out;
}

}  // namespace

// Each node's local rank 0 checks the node: one nvidia-smi (or NVML session) per node, not one
// per rank fighting over the driver, and one report per node to name it by.
void Supervisor::expect_preflight() {
  if (cfg_.preflight == PreflightMode::off) return;
  std::vector<int> checkers;
  for (const auto& r : cfg_.plan.ranks)
    if (r.local_rank == 0) checkers.push_back(r.rank);
  attempt_.expect_preflight(checkers, cfg_.preflight == PreflightMode::fail);
}

control::Rendezvous Supervisor::rendezvous() const {
  control::Rendezvous r{port_.value_or(0), port_checkable_ ? 1 : 0};
  if (cfg_.preflight != PreflightMode::off) {
    r.preflight = 1;
    r.min_tmp = static_cast<std::int64_t>(cfg_.preflight_min_tmp);
    r.bw_port = bw_port_;
  }
  return r;
}

void Supervisor::on_message(const From& c, const control::Preflight& m) {
  const bool was_done = attempt_.preflight_done();
  const bool go = attempt_.on_preflight(
      c.rank, Attempt::PreflightReport{lines_of(m.failures), lines_of(m.notes.value), m.mb_per_s});
  if (!was_done && attempt_.preflight_done()) report_preflight();
  if (go) send_go();
}

// Every node reported: what could not be checked and the links' figures (status lines), each
// failing node in one line, a link far slower than the others; with --preflight fail and a
// failing node, the attempt fails before any program started (no restart: the node stays bad).
void Supervisor::report_preflight() {
  int failed = 0, nodes = 0;
  std::vector<LinkFigure> links;
  const std::string& node0 = attempt_.rank(0).host;
  for (const Attempt::Rank& s : attempt_.ranks()) {
    if (!s.preflight) continue;
    ++nodes;
    for (const auto& n : s.preflight->notes) say(fmt::format("preflight: node {}: {}", s.host, n));
    if (s.preflight->mb_per_s >= 0) {
      links.push_back({s.host, s.preflight->mb_per_s});
      say(fmt::format("preflight: node {}: {:.0f} MB/s to rank 0's node {} ({} MiB each way)",
                      s.host, s.preflight->mb_per_s, node0, node_checks::kBandwidthBytes >> 20));
    }
    if (s.preflight->failures.empty()) continue;
    ++failed;
    tell(fmt::format("preflight: node {}: {}", s.host, joined(s.preflight->failures)));
  }
  for (const auto& l : slow_links(links)) tell("preflight: " + l);
  if (failed == 0) return;
  const std::string of = fmt::format("{} of {} node{}", failed, nodes, nodes == 1 ? "" : "s");
  if (cfg_.preflight == PreflightMode::warn) {
    tell(fmt::format("preflight failed on {}: starting anyway (--preflight warn)", of));
    return;
  }
  if (cfg_.plan_options.nnodes) {
    std::vector<LeftOut> bad = failed_preflight_nodes(attempt_);
    const int left = static_cast<int>(without_nodes(cfg_.alloc, bad).nodes.size());
    if (!too_few_nodes(left, *cfg_.plan_options.nnodes)) {
      tell(fmt::format("preflight failed on {}: leaving {} out (--nnodes {})", of,
                       bad.size() == 1 ? "it" : "them", to_string(*cfg_.plan_options.nnodes)));
      preflight_left_out_ = std::move(bad);
    }
  }
  if (preflight_left_out_.empty())
    tell(
        fmt::format("preflight failed on {}: no program started (--preflight warn starts anyway, "
                    "--preflight off skips the checks{})",
                    of,
                    cfg_.plan_options.nnodes
                        ? fmt::format("; fewer than --nnodes {} would be left without them",
                                      to_string(*cfg_.plan_options.nnodes))
                        : ""));
  attempt_.fail(-1, "failed its preflight", kPreflightStatus, proc::now_seconds() - t0_);
  begin_stop("");
}

// At the start timeout: the nodes whose checks never came (a hung nvidia-smi is cut at 10 s, so
// this is a node that never got that far).
void Supervisor::preflight_timeout_lines() {
  if (cfg_.preflight == PreflightMode::off) return;
  for (int r = 0; r < world_; ++r) {
    const Attempt::Rank& s = attempt_.rank(r);
    if (s.checks_node && s.started && !s.preflight)
      tell(fmt::format("preflight: node {} (rank {}) did not finish its checks", s.host, r));
  }
}

}  // namespace gpurun::launcher

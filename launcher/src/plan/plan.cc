// plan.cc: rank placement (block: fill each node in allocation order), GPU positions per rank,
// rendezvous address. Impossible requests are refused here, before anything starts.
#include "gpurun/launcher/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "gpurun/launcher/error.h"

namespace gpurun::launcher {

void parse_nproc_per_node(const std::string& value, PlanOptions& opts) {
  if (value == "auto") {
    opts.nproc_mode = NprocMode::automatic;
  } else if (value == "gpu") {
    opts.nproc_mode = NprocMode::gpu;
  } else {
    if (value.empty() || value.size() > 6 ||
        value.find_first_not_of("0123456789") != std::string::npos || std::stoi(value) < 1)
      throw Error(
          fmt::format("--nproc-per-node '{}': expected auto, gpu, or a positive count", value));
    opts.nproc_mode = NprocMode::count;
    opts.nproc_per_node = std::stoi(value);
  }
}

NodeRange parse_nnodes(const std::string& text) {
  const auto number = [&](const std::string& word) {
    if (word.empty() || word.size() > 6 ||
        word.find_first_not_of("0123456789") != std::string::npos)
      throw Error(fmt::format(
          "--nnodes '{}': expected N or MIN:MAX, node counts from 1 (as in --nnodes 1:2)", text));
    return std::stoi(word);
  };
  const std::size_t colon = text.find(':');
  NodeRange r;
  r.min = number(text.substr(0, colon));
  r.max = colon == std::string::npos ? r.min : number(text.substr(colon + 1));
  if (r.min < 1) throw Error(fmt::format("--nnodes '{}': MIN must be at least 1 node", text));
  if (r.max < r.min)
    throw Error(fmt::format("--nnodes '{}': MAX ({}) is below MIN ({})", text, r.max, r.min));
  return r;
}

Contracts parse_contracts(const std::string& value) {
  const auto bad = [&](const std::string& why) {
    return Error(fmt::format(
        "--contract '{}': {}; expected a comma-separated list of torch, tf and jax (default "
        "torch,tf,jax)",
        value, why));
  };
  Contracts c{false, false, false};
  std::size_t from = 0;
  while (true) {
    const std::size_t comma = value.find(',', from);
    const std::string word = value.substr(from, comma == std::string::npos ? comma : comma - from);
    bool* set = word == "torch" ? &c.torch
                : word == "tf"  ? &c.tf
                : word == "jax" ? &c.jax
                                : nullptr;
    if (!set)
      throw bad(word.empty() ? "an empty name" : fmt::format("unknown contract '{}'", word));
    if (*set) throw bad(fmt::format("'{}' twice", word));
    *set = true;
    if (comma == std::string::npos) return c;
    from = comma + 1;
  }
}

std::string to_string(const Contracts& c) {
  std::string s;
  for (const auto& [on, name] : {std::pair{c.torch, "torch"}, {c.tf, "tf"}, {c.jax, "jax"}})
    if (on) s += (s.empty() ? "" : ",") + std::string(name);
  return s;
}

int tf_worker_port(int master_port, int local_rank) {
  return master_port + 1 + local_rank;
}

int derive_master_port(const std::string& job_key) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : job_key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return 15000 + static_cast<int>(h % 17000);
}

namespace {

// "n1: 4, n2: 4" (the first 8 nodes, then how many more).
std::string slots_summary(const Allocation& a) {
  std::string s;
  for (std::size_t i = 0; i < a.nodes.size() && i < 8; ++i)
    s += fmt::format("{}{}: {}", i ? ", " : "", a.nodes[i].host, a.nodes[i].slots);
  if (a.nodes.size() > 8) s += fmt::format(", ... ({} nodes)", a.nodes.size());
  return s;
}

// How to get `want` task slots a node from the job's scheduler (each rank is a task of its
// engine: srun, mpirun and jsrun start no more than the slots).
std::string more_slots_hint(Scheduler s, int want) {
  switch (s) {
    case Scheduler::slurm:
      return fmt::format(
          "ask Slurm for {0} tasks a node (#SBATCH --ntasks-per-node={0}, with "
          "--cpus-per-task as each rank needs)",
          want);
    case Scheduler::pbs:
      return fmt::format("ask PBS for {} MPI processes a node (#PBS -l select=N:...:mpiprocs={})",
                         want, want);
    case Scheduler::lsf:
      return fmt::format("ask LSF for {} slots a node (#BSUB -R \"span[ptile={}]\")", want, want);
    default:
      return fmt::format("ask the scheduler for {} task slots a node", want);
  }
}

// Ranks each node can take under the chosen --nproc-per-node.
std::vector<int> capacities(const Allocation& a, const PlanOptions& o) {
  std::vector<int> cap;
  bool single_machine = a.scheduler == Scheduler::local || a.scheduler == Scheduler::gpuq;
  for (const auto& n : a.nodes) {
    switch (o.nproc_mode) {
      case NprocMode::count:
        if (o.nproc_per_node > n.slots && !a.oversubscribe_ok)
          throw Error(fmt::format(
              "--nproc-per-node {} but node {} has only {} task slots in this {} job: {}",
              o.nproc_per_node, n.host, n.slots, a.flavor,
              more_slots_hint(a.scheduler, o.nproc_per_node)));
        cap.push_back(o.nproc_per_node);
        break;
      case NprocMode::gpu:
        if (n.gpus == 0)
          throw Error(fmt::format(
              "--nproc-per-node gpu but node {} has no GPUs visible to this job", n.host));
        if (n.gpus > n.slots && !a.oversubscribe_ok)
          throw Error(fmt::format(
              "--nproc-per-node gpu wants {} ranks on {} but it has only {} task slots: {}", n.gpus,
              n.host, n.slots, more_slots_hint(a.scheduler, n.gpus)));
        cap.push_back(n.gpus);
        break;
      case NprocMode::automatic:  // gpuq: one rank per task or per GPU, whichever is more
        if (single_machine)
          cap.push_back(o.ntasks ? *o.ntasks : std::max({1, n.gpus, a.job_tasks.value_or(1)}));
        else
          cap.push_back(n.slots);
        break;
    }
  }
  return cap;
}

// Ranks on each node of the allocation, in order: the step's own placement inside srun/jsrun,
// else the nodes filled in order up to -n.
std::vector<int> ranks_per_node(const Allocation& a, const PlanOptions& o) {
  std::vector<int> per_node;
  if (a.step_task) {
    // Inside srun/jsrun the step already placed the ranks; -n can only agree with it.
    const StepTask& t = *a.step_task;
    if (o.ntasks && *o.ntasks != t.world_size)
      throw Error(fmt::format(
          "-n {} but gpurun runs as one task of a {} step with {} tasks: drop -n, or run gpurun "
          "once per job (not under {}) and let it launch the ranks",
          *o.ntasks, t.engine, t.world_size, t.engine));
    for (const auto& n : a.nodes) per_node.push_back(n.slots);
    // --nproc-per-node likewise (gpurun in `srun --pty bash` is one task: it would run one rank
    // where the user asked one per GPU).
    for (std::size_t i = 0; i < a.nodes.size(); ++i) {
      const int want = o.nproc_mode == NprocMode::count ? o.nproc_per_node
                       : o.nproc_mode == NprocMode::gpu ? a.nodes[i].gpus
                                                        : per_node[i];
      if (want != per_node[i])
        throw Error(fmt::format(
            "--nproc-per-node {} asks for {} ranks on {}, but gpurun runs as one task of a {} "
            "step with {} task(s) there: drop --nproc-per-node, or run gpurun outside {} (in the "
            "batch script, or `salloc` without `srun --pty`) and let it launch the ranks",
            o.nproc_mode == NprocMode::gpu ? "gpu" : std::to_string(o.nproc_per_node), want,
            a.nodes[i].host, t.engine, per_node[i], t.engine));
    }
    return per_node;
  }
  std::vector<int> cap = capacities(a, o);
  long total_cap = 0;
  for (int c : cap) total_cap += c;
  const long want_l = o.ntasks ? *o.ntasks : total_cap;
  if (want_l > kMaxRanks)
    throw Error(
        fmt::format("{} ranks asked for (the allocation's slots: {}); at most {} are planned",
                    want_l, slots_summary(a), kMaxRanks));
  const int want = static_cast<int>(want_l);
  if (want > total_cap)
    throw Error(fmt::format("-n {} asks for more ranks than the allocation's {} slots ({})", want,
                            total_cap, slots_summary(a)));
  int left = want;
  for (int c : cap) {
    int take = std::min(c, left);
    per_node.push_back(take);
    left -= take;
  }
  return per_node;
}

// Appends node `n`'s k ranks (from global rank `rank`) with their GPU positions.
void plan_node(const NodeAlloc& n, int k, const PlanOptions& o, RankPlan& p) {
  int rank = static_cast<int>(p.ranks.size());
  int node_rank = static_cast<int>(p.nodes.size());
  p.nodes.push_back({n.host, k, n.gpus, rank, n.gpu_ids});
  int gpr;
  bool shared = false;
  if (o.gpus_per_rank) {
    gpr = *o.gpus_per_rank;
    if (k * gpr > n.gpus)
      throw Error(fmt::format("{} ranks x {} GPUs per rank need {} GPUs on node {}, which has {}",
                              k, gpr, k * gpr, n.host, n.gpus));
  } else if (n.gpus == 0) {
    gpr = 0;
  } else if (k <= n.gpus) {
    gpr = 1;
  } else {
    gpr = 1;
    shared = true;
    p.notes.push_back(
        fmt::format("{} ranks share {} GPU{} on {}", k, n.gpus, n.gpus == 1 ? "" : "s", n.host));
  }
  for (int lr = 0; lr < k; ++lr) {
    RankEntry e{rank++, node_rank, lr, k, n.host, {}};
    if (shared) {
      e.gpus.push_back(static_cast<int>(static_cast<long>(lr) * n.gpus / k));
    } else {
      for (int g = 0; g < gpr; ++g) e.gpus.push_back(lr * gpr + g);
    }
    p.ranks.push_back(std::move(e));
  }
}

// TF_CONFIG's worker ports (tf_worker_port()) must all be ports: a --master-port near 65535 leaves
// no room for a node's workers above it.
void check_tf_ports(const RankPlan& p) {
  if (!p.contracts.tf) return;
  int most = 0;
  for (const auto& n : p.nodes) most = std::max(most, n.ranks);
  const int top = tf_worker_port(p.master_port, most - 1);
  if (top > 65535)
    throw Error(fmt::format(
        "--master-port {} leaves no room for TF_CONFIG's worker ports (MASTER_PORT + 1 + local "
        "rank, up to {} with {} ranks on a node): choose a port below {}, or leave tf out of "
        "--contract",
        p.master_port, top, most, 65535 - most));
}

// TF_CONFIG lists every rank's host:port, so it grows with the world; one environment variable
// holds at most MAX_ARG_STRLEN (128 KiB) and past it the program cannot start (execve: E2BIG).
// 8,192 ranks made 123 kB, and the default contracts gave every PyTorch job a TF_CONFIG.
constexpr std::size_t kMaxTfConfigBytes = 120 * 1024;

void fit_tf_config(RankPlan& p, bool given) {
  if (!p.contracts.tf) return;
  std::size_t bytes = 80;        // {"cluster":{"worker":[...]},"task":{"type":"worker","index":N}}
  for (const auto& r : p.ranks)  // "host:port", with brackets for an IPv6 literal
    bytes += (p.nodes.size() == 1 ? p.master_addr : r.host).size() + 11;
  if (bytes <= kMaxTfConfigBytes) return;
  const std::string why = fmt::format(
      "TF_CONFIG for {} ranks would be about {} kB, more than one environment variable holds "
      "(128 KiB)",
      p.world_size, bytes / 1000);
  if (given)
    throw Error(
        fmt::format("--contract tf: {}: leave tf out of --contract, and give TensorFlow "
                    "its cluster another way (a ClusterResolver)",
                    why));
  p.contracts.tf = false;
  p.notes.push_back(why + ": the ranks get no TF_CONFIG (--contract torch,jax says so)");
}

}  // namespace

namespace {

// --nnodes: at least MIN nodes in the allocation; the first MAX of them. -n cannot follow a
// world size that changes with the nodes, so MIN < MAX refuses it.
Allocation nodes_in_range(const Allocation& a, const PlanOptions& o) {
  if (!o.nnodes) return a;
  const NodeRange& r = *o.nnodes;
  const int have = static_cast<int>(a.nodes.size());
  const std::string range =
      r.min == r.max ? std::to_string(r.min) : fmt::format("{}:{}", r.min, r.max);
  if (have < r.min)
    throw Error(
        fmt::format("--nnodes {} needs at least {} node{}, but the {} allocation has {} ({})",
                    range, r.min, r.min == 1 ? "" : "s", a.flavor, have, slots_summary(a)));
  if (o.ntasks && r.min < r.max)
    throw Error(fmt::format(
        "-n {} with --nnodes {}: the world size follows the nodes that are left, so -n cannot "
        "hold it; use --nproc-per-node (ranks per node) instead",
        *o.ntasks, range));
  if (a.step_task && have > r.max)
    throw Error(fmt::format(
        "--nnodes {}: gpurun runs as one task of a {} step over {} nodes, which placed the ranks "
        "already; run gpurun once per job (not under {}) to choose the nodes",
        range, a.step_task->engine, have, a.step_task->engine));
  Allocation out = a;
  if (have > r.max) out.nodes.resize(static_cast<std::size_t>(r.max));
  return out;
}

}  // namespace

RankPlan make_plan(const Allocation& all, const PlanOptions& o) {
  if (all.nodes.empty()) throw Error("the allocation has no nodes");
  const Allocation a = nodes_in_range(all, o);
  if (o.ntasks && *o.ntasks < 1)
    throw Error(fmt::format("-n {}: expected at least 1 rank", *o.ntasks));
  if (o.gpus_per_rank && *o.gpus_per_rank < 0)
    throw Error(fmt::format("--gpus-per-rank {}: expected 0 or more", *o.gpus_per_rank));

  RankPlan p;
  std::vector<int> per_node = ranks_per_node(a, o);
  for (std::size_t i = 0; i < a.nodes.size(); ++i)
    if (per_node[i] > 0) plan_node(a.nodes[i], per_node[i], o, p);
  p.world_size = static_cast<int>(p.ranks.size());
  if (p.nodes.empty()) throw Error(fmt::format("the plan has no rank ({})", slots_summary(a)));

  bool single_machine = a.scheduler == Scheduler::local || a.scheduler == Scheduler::gpuq;
  p.master_addr = single_machine ? "127.0.0.1" : p.nodes.front().host;
  p.master_port = o.master_port ? *o.master_port
                                : derive_master_port(fmt::format("{}:{}", to_string(a.scheduler),
                                                                 a.job_id.value_or("none")));
  p.contracts = o.contracts;
  fit_tf_config(p, o.contracts_given);
  check_tf_ports(p);
  if (o.cpus_per_rank) {
    if (*o.cpus_per_rank < 1) throw Error("--cpus-per-rank: expected at least 1");
    p.cpus_per_rank = *o.cpus_per_rank;
  } else if (a.cpus_per_task) {
    p.cpus_per_rank = *a.cpus_per_task;
  } else if (single_machine) {
    p.cpus_per_rank = std::max(1, a.nodes.front().slots / std::max(1, p.nodes.front().ranks));
    if (a.scheduler == Scheduler::gpuq) p.cpus_per_rank = 1;
  }
  return p;
}

}  // namespace gpurun::launcher

// detect_batch.cc: PBS Pro / Torque and LSF allocations.
//
// PBS: PBS_NODEFILE has one line per slot (a repeated host is another slot); Torque adds
// PBS_NUM_NODES/PBS_NUM_PPN/PBS_NP and PBS_GPUFILE ("<host>-gpu<idx>" lines); PBS Pro's cgroup
// hook puts GPU UUIDs in CUDA_VISIBLE_DEVICES. LSF: LSB_DJOB_HOSTFILE (one host per slot) and
// LSB_MCPU_HOSTS ("host n" pairs) give the order; LSB_HOSTS' order may differ and is not used.
// On Summit-like systems the first host is the launch node (one slot, batch*/login*): no ranks.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "alloc/detect_internal.h"
#include "alloc/env_util.h"
#include "gpurun/launcher/error.h"

namespace gpurun::launcher::detail {
namespace {

std::string slots_text(const std::vector<NodeAlloc>& nodes) {
  std::string s;
  for (const auto& n : nodes) s += fmt::format("{}{} {}", s.empty() ? "" : " ", n.host, n.slots);
  return s;
}

void apply_gpu_count(Allocation& a, int gpus, const char* scheduler) {
  for (auto& n : a.nodes) n.gpus = gpus;
  if (a.nodes.size() > 1 && gpus > 0)
    a.notes.push_back(fmt::format(
        "{} shows only this node's GPUs ({}); the other nodes are taken to have as many", scheduler,
        gpus));
}

// Torque's PBS_GPUFILE: "<host>-gpu<index>" lines, grouped by host in order.
std::map<std::string, std::vector<std::string>> read_gpu_file(const DetectInput& in,
                                                              const std::string& path) {
  const std::string text = read_bounded(in, "PBS_GPUFILE", path);
  std::map<std::string, std::vector<std::string>> per_host;
  std::istringstream is(text);
  std::string raw;
  for (int n = 1; std::getline(is, raw); ++n) {
    const std::string line = trim(raw);
    if (line.empty()) continue;
    auto dash = line.rfind("-gpu");
    if (dash == std::string::npos || dash + 4 >= line.size() || dash + 4 + 9 < line.size() ||
        line.find_first_not_of("0123456789", dash + 4) != std::string::npos ||
        !is_host_name(line.substr(0, dash)))
      throw Error(fmt::format("PBS_GPUFILE={}:{}: '{}' is not '<host>-gpu<index>'", shown(path), n,
                              shown(line, 40)));
    per_host[line.substr(0, dash)].push_back(line.substr(dash + 4));
  }
  return per_host;
}

// LSB_MCPU_HOSTS' "host slots" pairs, in order; empty when it is not set.
std::vector<NodeAlloc> mcpu_hosts(const Env& env) {
  auto m = get(env, "LSB_MCPU_HOSTS");
  if (!m) return {};
  auto w = split_ws(*m);
  if (w.size() % 2 != 0)
    throw Error(fmt::format("LSB_MCPU_HOSTS='{}': expected 'host slots' pairs", shown(*m)));
  NodesInOrder mcpu;
  for (std::size_t i = 0; i < w.size(); i += 2) {
    check_host("LSB_MCPU_HOSTS", w[i]);
    mcpu.add(w[i], slot_count("LSB_MCPU_HOSTS", parse_count("LSB_MCPU_HOSTS", w[i + 1]), w[i]),
             "LSB_MCPU_HOSTS");
  }
  return mcpu.take();
}

}  // namespace

Allocation detect_pbs(const DetectInput& in) {
  const Env& env = in.env;
  Allocation a;
  a.scheduler = Scheduler::pbs;
  a.job_id = get(env, "PBS_JOBID");
  if (!a.job_id) throw Error("--scheduler pbs: PBS_JOBID is not set (not inside a PBS job?)");
  bool torque = get(env, "PBS_NUM_NODES") || get(env, "PBS_NUM_PPN") || get(env, "PBS_NP") ||
                get(env, "PBS_VERSION").value_or("").rfind("TORQUE", 0) == 0;
  a.flavor = torque ? "Torque" : "PBS Pro";
  a.nodes = read_host_file(in, "PBS_NODEFILE", &a.host_file_interleaved);
  a.sources.push_back("PBS_NODEFILE");

  int slots = a.total_slots();
  if (auto np = get_count(env, "PBS_NP"); np && *np != slots)
    throw Error(fmt::format("PBS_NP={} but PBS_NODEFILE lists {} slots ({})", *np, slots,
                            slots_text(a.nodes)));
  if (auto nn = get_count(env, "PBS_NUM_NODES"); nn && *nn != static_cast<long>(a.nodes.size()))
    throw Error(fmt::format("PBS_NUM_NODES={} but PBS_NODEFILE lists {} hosts ({})", *nn,
                            a.nodes.size(), slots_text(a.nodes)));
  if (auto ppn = get_count(env, "PBS_NUM_PPN")) {
    for (const auto& n : a.nodes)
      if (n.slots != *ppn)
        throw Error(fmt::format("PBS_NUM_PPN={} but PBS_NODEFILE lists {} slots on {}", *ppn,
                                n.slots, n.host));
  }

  // The batch script runs on the mother superior, the first host of the node file.
  a.this_host = a.nodes.front().host;

  if (auto gf = get(env, "PBS_GPUFILE")) {
    std::map<std::string, std::vector<std::string>> per_host = read_gpu_file(in, *gf);
    for (auto& n : a.nodes) {
      auto it = per_host.find(n.host);
      n.gpus = it == per_host.end() ? 0 : static_cast<int>(it->second.size());
      if (it != per_host.end()) n.gpu_ids = it->second;
    }
    a.sources.push_back("PBS_GPUFILE");
    if (auto cvd = visible_from_cvd(env)) {
      a.local_gpu_ids = *cvd;
    } else {
      auto it = per_host.find(*a.this_host);
      if (it != per_host.end()) a.local_gpu_ids = it->second;
    }
  } else if (auto cvd = visible_from_cvd(env)) {
    a.local_gpu_ids = *cvd;
    a.sources.push_back("CUDA_VISIBLE_DEVICES");
    apply_gpu_count(a, static_cast<int>(cvd->size()), a.flavor.c_str());
  }

  // PBS Pro's NCPUS is the first chunk's ncpus, shared by the chunk's mpiprocs.
  if (auto nc = get_count(env, "NCPUS"); nc && !torque)
    a.cpus_per_task = std::max<int>(1, static_cast<int>(*nc) / a.nodes.front().slots);
  return a;
}

Allocation detect_lsf(const DetectInput& in) {
  const Env& env = in.env;
  Allocation a;
  a.scheduler = Scheduler::lsf;
  a.flavor = "LSF";
  a.job_id = get(env, "LSB_JOBID");
  if (!a.job_id) throw Error("--scheduler lsf: LSB_JOBID is not set (not inside an LSF job?)");
  if (auto index = get_count(env, "LSB_JOBINDEX"); index && *index > 0)  // 0: not an array
    a.array_task = fmt::format("{}[{}]", *a.job_id, *index);

  std::vector<NodeAlloc> mcpu = mcpu_hosts(env);
  if (get(env, "LSB_DJOB_HOSTFILE")) {
    a.nodes = read_host_file(in, "LSB_DJOB_HOSTFILE");
    a.sources.push_back("LSB_DJOB_HOSTFILE");
    if (!mcpu.empty()) {
      auto key = [](std::vector<NodeAlloc> v) {
        std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.host < y.host; });
        std::string s;
        for (auto& n : v) s += n.host + ":" + std::to_string(n.slots) + " ";
        return s;
      };
      if (key(mcpu) != key(a.nodes))
        throw Error(fmt::format("LSB_MCPU_HOSTS='{}' and LSB_DJOB_HOSTFILE ({}) disagree",
                                *get(env, "LSB_MCPU_HOSTS"), slots_text(a.nodes)));
    }
  } else if (!mcpu.empty()) {
    a.nodes = mcpu;
    a.sources.push_back("LSB_MCPU_HOSTS");
  } else if (auto h = get(env, "LSB_HOSTS")) {
    NodesInOrder hosts;
    for (const auto& host : split_ws(*h)) {
      check_host("LSB_HOSTS", host);
      hosts.add(host, 1, "LSB_HOSTS");
    }
    a.nodes = hosts.take();
    a.sources.push_back("LSB_HOSTS");
  }
  if (a.nodes.empty())
    throw Error("LSB_JOBID is set but none of LSB_DJOB_HOSTFILE, LSB_MCPU_HOSTS, LSB_HOSTS is");

  a.this_host = a.nodes.front().host;  // the batch script runs on the first host
  const std::string& first = a.nodes.front().host;
  if (a.nodes.size() > 1 && a.nodes.front().slots == 1 &&
      (first.rfind("batch", 0) == 0 || first.rfind("login", 0) == 0)) {
    a.notes.push_back(
        fmt::format("{} is the launch node (1 slot, Summit-style): it gets no ranks", first));
    a.this_host = first;
    a.nodes.erase(a.nodes.begin());
  }

  if (auto cvd = visible_from_cvd(env)) {
    a.local_gpu_ids = *cvd;
    a.sources.push_back("CUDA_VISIBLE_DEVICES");
    apply_gpu_count(a, static_cast<int>(cvd->size()), "LSF");
  }

  if (auto r = get_count(env, "JSM_NAMESPACE_RANK")) {
    StepTask t;
    t.engine = "jsrun";
    t.rank = static_cast<int>(*r);
    t.world_size = static_cast<int>(get_count(env, "JSM_NAMESPACE_SIZE").value_or(1));
    t.local_rank = static_cast<int>(get_count(env, "JSM_NAMESPACE_LOCAL_RANK").value_or(0));
    t.local_world_size = static_cast<int>(get_count(env, "JSM_NAMESPACE_LOCAL_SIZE").value_or(1));
    if (t.rank >= t.world_size)
      throw Error(
          fmt::format("JSM_NAMESPACE_RANK={} but JSM_NAMESPACE_SIZE={}", t.rank, t.world_size));
    t.node_rank = t.rank / std::max(1, t.local_world_size);
    a.step_task = t;
    a.this_host = in.hostname;
    a.sources.push_back("JSM_NAMESPACE_*");
  }
  return a;
}

}  // namespace gpurun::launcher::detail

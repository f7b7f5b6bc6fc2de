// detect_slurm.cc: the allocation of a Slurm job, from the batch step or from inside an srun task.
//
// Inside a step the SLURM_STEP_* values are the truth (a step may use part of the job); job-level
// counts there are a classic trap (a 1-node step of a 2-node job still sees SLURM_NTASKS of the
// job in some versions). CUDA_VISIBLE_DEVICES is what CUDA can open (cgroup-relative under
// ConstrainDevices); SLURM_STEP_GPUS/SLURM_JOB_GPUS are global ids and used only as a fallback.
#include <fmt/format.h>

#include <map>
#include <numeric>

#include "alloc/detect_internal.h"
#include "alloc/env_util.h"
#include "gpurun/launcher/error.h"
#include "gpurun/launcher/hostlist.h"

namespace gpurun::launcher::detail {
namespace {

// Slurm's special step ids (slurm.h): not srun steps, so gpurun launches from them.
constexpr long kBatchStep = 4294967291L;        // 0xfffffffb
constexpr long kInteractiveStep = 4294967290L;  // 0xfffffffa
constexpr long kExternStep = 4294967292L;       // 0xfffffffc

std::vector<std::string> expand_var(const std::string& name, const std::string& value) {
  try {
    return expand_hostlist(value);
  } catch (const HostlistError& e) {
    throw Error(fmt::format("{}={}: {} (at character {})", name, shown(value, 120), e.reason(),
                            e.position() + 1),
                e.pointer());
  }
}

std::vector<int> expand_tpn(const std::string& name, const std::string& value) {
  try {
    return expand_tasks_per_node(value);
  } catch (const HostlistError& e) {
    throw Error(fmt::format("{}={}: {} (at character {})", name, shown(value, 120), e.reason(),
                            e.position() + 1),
                e.pointer());
  }
}

// The job's (or step's) nodes and task slots per node, checked against the counts Slurm also
// gives.
struct SlurmNodes {
  std::vector<std::string> hosts;
  std::vector<int> counts;
  int tasks = 0;
};

SlurmNodes slurm_nodes(const Env& env, bool step_vars, Allocation& a) {
  SlurmNodes n;
  auto nl = step_vars ? first_of(env, {"SLURM_STEP_NODELIST"})
                      : first_of(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!nl)
    throw Error(fmt::format("SLURM_JOB_ID={} is set but SLURM_JOB_NODELIST is not", *a.job_id));
  n.hosts = expand_var(nl->first, nl->second);
  if (n.hosts.empty()) throw Error(fmt::format("{} is empty", nl->first));
  for (const auto& h : n.hosts) check_host(nl->first, h);
  a.sources.push_back(nl->first);

  auto tpn = step_vars ? first_of(env, {"SLURM_STEP_TASKS_PER_NODE"})
                       : first_of(env, {"SLURM_TASKS_PER_NODE"});
  if (tpn) {
    n.counts = expand_tpn(tpn->first, tpn->second);
    a.sources.push_back(tpn->first);
    if (n.counts.size() != n.hosts.size())
      throw Error(fmt::format("{}={} describes {} nodes but {}={} names {}", tpn->first,
                              shown(tpn->second), n.counts.size(), nl->first, shown(nl->second),
                              n.hosts.size()));
    for (std::size_t i = 0; i < n.counts.size(); ++i)
      slot_count(fmt::format("{}={}", tpn->first, shown(tpn->second)), n.counts[i], n.hosts[i]);
  } else {
    n.counts.assign(n.hosts.size(), 1);
    a.notes.push_back("SLURM_TASKS_PER_NODE is not set: one task slot per node");
  }

  auto nn = step_vars ? first_of(env, {"SLURM_STEP_NUM_NODES"})
                      : first_of(env, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"});
  if (nn && parse_count(nn->first, nn->second) != static_cast<long>(n.hosts.size()))
    throw Error(fmt::format("{}={} but {}={} names {} nodes", nn->first, nn->second, nl->first,
                            nl->second, n.hosts.size()));
  const long tasks = std::accumulate(n.counts.begin(), n.counts.end(), 0L);
  if (tasks > kMaxRanks)
    throw Error(fmt::format("{} adds up to {} task slots; at most {} are planned",
                            tpn ? tpn->first : "SLURM_TASKS_PER_NODE", tasks, kMaxRanks));
  n.tasks = static_cast<int>(tasks);
  auto nt = step_vars ? first_of(env, {"SLURM_STEP_NUM_TASKS"})
                      : first_of(env, {"SLURM_NTASKS", "SLURM_NPROCS"});
  if (nt && parse_count(nt->first, nt->second) != n.tasks)
    throw Error(fmt::format("{}={} but {}={} adds up to {} tasks", nt->first, nt->second,
                            tpn ? tpn->first : "SLURM_TASKS_PER_NODE",
                            tpn ? tpn->second : "(unset)", n.tasks));
  return n;
}

// GRES entries split at the commas between them, not at those of an IDX list inside "(...)".
std::vector<std::string> gres_entries(const std::string& gres) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (char c : gres) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (c == ',' && depth == 0)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

// How many GPUs one GRES entry names: "gpu:2(IDX:0-1)", "gpu:a100:1(IDX:3)", "gpu:2(IDX:0,2)",
// or Slurm's form for GPUs without indices, "gpu(CNT:2)", "gpu:a100(CNT:2)"; 0 for other GRES
// ("nic:1(IDX:0)"). The IDX list is counted, the count before it checked.
int gres_gpu_count(const std::string& entry, const std::string& where) {
  const auto paren = entry.find('(');
  const std::string head = entry.substr(0, paren);
  if (head.substr(0, head.find(':')) != "gpu") return 0;
  if (paren != std::string::npos && entry.compare(paren, 5, "(CNT:") == 0 && entry.back() == ')') {
    const long cnt = parse_count(where, entry.substr(paren + 5, entry.size() - paren - 6));
    if (cnt > kMaxNodeSlots)
      throw Error(fmt::format("{}: GRES '{}' counts more than {} GPUs", where, shown(entry),
                              kMaxNodeSlots));
    return static_cast<int>(cnt);
  }
  const auto colon = head.rfind(':');
  const std::string count = colon == std::string::npos ? "" : head.substr(colon + 1);
  if (count.empty() || count.size() > 6 ||
      count.find_first_not_of("0123456789") != std::string::npos)
    throw Error(fmt::format("{}: GRES '{}' has no GPU count", where, shown(entry)));
  if (paren == std::string::npos || entry.compare(paren, 5, "(IDX:") != 0 || entry.back() != ')')
    return std::stoi(count);
  int ids = 0;
  for (const auto& part : parse_gpu_list(entry.substr(paren + 5, entry.size() - paren - 6))) {
    const auto dash = part.find('-');
    const long lo = parse_count(where, part.substr(0, dash));
    const long hi = dash == std::string::npos ? lo : parse_count(where, part.substr(dash + 1));
    if (hi < lo || hi - lo >= kMaxNodeSlots)
      throw Error(fmt::format("{}: GRES '{}': bad IDX range '{}'", where, shown(entry), part));
    ids += static_cast<int>(hi - lo + 1);
  }
  if (ids != std::stoi(count))
    throw Error(fmt::format("{}: GRES '{}' counts {} GPUs but its IDX lists {}", where,
                            shown(entry), count, ids));
  return ids;
}

}  // namespace

std::map<std::string, int> slurm_job_gpus(const std::string& text) {
  std::map<std::string, int> gpus;
  for (const auto& line : split_lines(text)) {
    std::optional<std::string> nodes, gres;
    for (const auto& w : split_ws(line)) {
      if (w.rfind("Nodes=", 0) == 0) nodes = w.substr(6);
      if (w.rfind("GRES=", 0) == 0) gres = w.substr(5);
    }
    if (!nodes || !gres) continue;
    const std::string where = "scontrol -d show job: " + shown(line, 120);
    int count = 0;
    for (const auto& e : gres_entries(*gres)) count += gres_gpu_count(e, where);
    for (const auto& h : expand_var(where, *nodes)) {
      check_host(where, h);
      gpus[h] = count;
    }
  }
  return gpus;
}

namespace {

// The salloc shell has no GPU variable at all: Slurm's controller knows the job's GPUs on each
// node. Empty when it cannot tell (no scontrol) or the job has none.
std::map<std::string, int> salloc_job_gpus(const DetectInput& in, Allocation& a) {
  if (!in.slurm_job_details) return {};
  for (const char* v :
       {"CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE"})
    if (get(in.env, v)) return {};
  auto text = in.slurm_job_details(*a.job_id);
  if (!text) return {};
  try {
    return slurm_job_gpus(*text);
  } catch (const Error& e) {  // a form not read here: the job runs as it did before, GPU-less
    a.notes.push_back(fmt::format("the job's GPUs could not be read from scontrol: {}", e.what()));
    return {};
  }
}

// GPUs of this node. Slurm describes only the node we run on; other nodes of a job are assumed
// to match it (gres requests are per node). Returns the node's GPU count.
int slurm_gpus(const Env& env, bool in_step, std::size_t nodes, Allocation& a) {
  auto gpu_ids = first_of(env, {in_step ? "SLURM_STEP_GPUS" : "SLURM_JOB_GPUS"});
  auto gon = get_count(env, "SLURM_GPUS_ON_NODE");
  if (auto cvd = visible_from_cvd(env)) {
    a.local_gpu_ids = *cvd;
    a.sources.push_back("CUDA_VISIBLE_DEVICES");
    if (gpu_ids && gpu_ids->second != get(env, "CUDA_VISIBLE_DEVICES").value_or(""))
      a.notes.push_back(fmt::format(
          "{}={} are the node's global GPU ids; CUDA sees CUDA_VISIBLE_DEVICES={} (relative to "
          "the job's cgroup): ranks are bound through CUDA_VISIBLE_DEVICES",
          gpu_ids->first, gpu_ids->second, *get(env, "CUDA_VISIBLE_DEVICES")));
  } else if (gpu_ids) {
    a.local_gpu_ids = parse_gpu_list(gpu_ids->second);
    a.sources.push_back(gpu_ids->first);
  } else if (gon) {
    for (long i = 0; i < *gon; ++i) a.local_gpu_ids.push_back(std::to_string(i));
    a.sources.push_back("SLURM_GPUS_ON_NODE");
  }
  int node_gpus = gon ? static_cast<int>(*gon) : static_cast<int>(a.local_gpu_ids.size());
  if (gon) a.sources.push_back("SLURM_GPUS_ON_NODE");
  if (gon && static_cast<long>(a.local_gpu_ids.size()) > *gon)
    throw Error(fmt::format("SLURM_GPUS_ON_NODE={} but CUDA_VISIBLE_DEVICES={} lists {} GPUs", *gon,
                            get(env, "CUDA_VISIBLE_DEVICES").value_or(""), a.local_gpu_ids.size()));
  // In the batch script a narrower CUDA_VISIBLE_DEVICES is the user's choice (a step's is its
  // task's share, --gpus-per-task): the ranks get what it lists.
  if (!in_step && gon && get(env, "CUDA_VISIBLE_DEVICES") &&
      static_cast<long>(a.local_gpu_ids.size()) < *gon) {
    a.notes.push_back(fmt::format(
        "CUDA_VISIBLE_DEVICES lists {} of the node's {} GPUs (SLURM_GPUS_ON_NODE): the ranks use "
        "those {}",
        a.local_gpu_ids.size(), *gon, a.local_gpu_ids.size()));
    node_gpus = static_cast<int>(a.local_gpu_ids.size());
  }
  if (nodes > 1 && node_gpus > 0)
    a.notes.push_back(fmt::format(
        "Slurm describes only this node's GPUs ({}); the other nodes are taken to have as many",
        node_gpus));
  return node_gpus;
}

// CPUs per task, and when the job's time runs out.
void slurm_cpus_and_end(const Env& env, const SlurmNodes& n, Allocation& a) {
  if (auto c = get_count(env, "SLURM_CPUS_PER_TASK")) {
    a.cpus_per_task = static_cast<int>(*c);
  } else if (auto con = get_count(env, "SLURM_CPUS_ON_NODE")) {
    // Tasks of this node share its CPUs.
    int here = 0;
    if (a.this_host)
      for (std::size_t i = 0; i < n.hosts.size(); ++i)
        if (n.hosts[i] == *a.this_host) here = n.counts[i];
    if (here == 0) here = n.counts[0];
    a.cpus_per_task = std::max<int>(1, static_cast<int>(*con) / std::max(1, here));
  }
  read_job_end_time(env, a);
}

}  // namespace

// This srun task's place in its step, whose nodes are `hosts` with `counts` tasks each.
StepTask srun_step_task(const Env& env, const std::vector<std::string>& hosts,
                        const std::vector<int>& counts, int tasks) {
  StepTask t;
  t.engine = "srun";
  t.world_size = tasks;
  t.rank = static_cast<int>(get_count(env, "SLURM_PROCID").value_or(0));
  t.local_rank = static_cast<int>(get_count(env, "SLURM_LOCALID").value_or(0));
  t.node_rank = static_cast<int>(get_count(env, "SLURM_NODEID").value_or(0));
  if (t.rank >= tasks)
    throw Error(fmt::format("SLURM_PROCID={} but the step has {} tasks", t.rank, tasks));
  if (t.node_rank >= static_cast<int>(hosts.size()))
    throw Error(
        fmt::format("SLURM_NODEID={} but the step has {} nodes", t.node_rank, hosts.size()));
  t.local_world_size = counts[static_cast<std::size_t>(t.node_rank)];
  if (t.local_rank >= t.local_world_size)
    throw Error(fmt::format("SLURM_LOCALID={} but node {} runs {} tasks of the step", t.local_rank,
                            hosts[static_cast<std::size_t>(t.node_rank)], t.local_world_size));
  return t;
}

void read_job_end_time(const Env& env, Allocation& a) {
  if (auto end = first_of(env, {"SLURM_JOB_END_TIME"})) {
    const std::string& v = end->second;
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
      throw Error(fmt::format("SLURM_JOB_END_TIME={}: expected UNIX seconds", v));
    if (long long t = std::stoll(v); t > 0) a.end_time = t;  // 0: no time limit
  }
}

Allocation detect_slurm(const DetectInput& in) {
  const Env& env = in.env;
  Allocation a;
  a.scheduler = Scheduler::slurm;
  a.flavor = "Slurm";
  auto job = first_of(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!job) throw Error("--scheduler slurm: SLURM_JOB_ID is not set (not inside a Slurm job?)");
  a.job_id = job->second;
  // An array task has its own SLURM_JOB_ID, but the first task's equals SLURM_ARRAY_JOB_ID, which
  // scontrol takes for the whole array: <array>_<task> names this task alone.
  auto array = first_of(env, {"SLURM_ARRAY_JOB_ID"});
  auto task = first_of(env, {"SLURM_ARRAY_TASK_ID"});
  if (array && task)
    a.array_task = fmt::format("{}_{}", parse_count(array->first, array->second),
                               parse_count(task->first, task->second));

  auto step = first_of(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  bool in_step = false;
  if (step) {
    long id = parse_count(step->first, step->second);
    in_step = id != kBatchStep && id != kInteractiveStep && id != kExternStep;
  }
  // A step without its own node list (very old Slurm) falls back to the job's, with a note.
  if (in_step && !get(env, "SLURM_STEP_NODELIST")) {
    a.notes.push_back("SLURM_STEP_NODELIST is not set: using the job's node list for the step");
  }
  bool step_vars = in_step && get(env, "SLURM_STEP_NODELIST").has_value();

  SlurmNodes n = slurm_nodes(env, step_vars, a);
  int node_gpus = slurm_gpus(env, in_step, n.hosts.size(), a);
  auto job_gpus = in_step ? std::map<std::string, int>{} : salloc_job_gpus(in, a);
  if (!job_gpus.empty()) {
    a.sources.push_back("scontrol -d show job");
    a.notes.push_back(fmt::format(
        "no GPU variable here (the salloc shell): the job's GPUs per node are scontrol -d show "
        "job {}'s GRES",
        *a.job_id));
  }
  for (std::size_t i = 0; i < n.hosts.size(); ++i) {
    auto g = job_gpus.find(n.hosts[i]);
    a.nodes.push_back({n.hosts[i], n.counts[i], g != job_gpus.end() ? g->second : node_gpus});
  }
  a.this_host = get(env, "SLURMD_NODENAME");
  slurm_cpus_and_end(env, n, a);
  if (in_step) {
    a.step_task = srun_step_task(env, n.hosts, n.counts, n.tasks);
    if (!a.this_host) a.this_host = n.hosts[static_cast<std::size_t>(a.step_task->node_rank)];
  }
  return a;
}

}  // namespace gpurun::launcher::detail

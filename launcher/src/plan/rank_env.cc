// rank_env.cc: the environment of one rank.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "alloc/env_util.h"
#include "gpurun/launcher/error.h"
#include "gpurun/launcher/launch.h"

namespace gpurun::launcher {

bool step_bound_task_gpus(const Allocation& a, const RankPlan& plan) {
  const int node_gpus = plan.nodes.at(static_cast<std::size_t>(a.step_task->node_rank)).gpus;
  return !a.local_gpu_ids.empty() && static_cast<int>(a.local_gpu_ids.size()) < node_gpus;
}

bool srun_bound_task_gpus(const Env& task_env, std::size_t visible, int node_gpus) {
  // slurmstepd tells a task how srun bound its GPUs: gpu:per_task:1 for --gpus-per-task=1,
  // gpu:closest, gpu:map_gpu:... for --gpu-bind; gpu:none (or nothing) when it bound none.
  auto bind = detail::get(task_env, "SLURMD_TRES_BIND");
  const bool bound = bind && bind->rfind("gpu:", 0) == 0 && *bind != "gpu:none";
  return bound && visible > 0 && static_cast<int>(visible) < node_gpus;
}

std::vector<int> task_gpu_share(std::size_t visible) {
  std::vector<int> all;
  for (std::size_t i = 0; i < visible; ++i) all.push_back(static_cast<int>(i));
  return all;
}

RankEntry step_task_entry(const Allocation& a, const RankPlan& plan) {
  const StepTask& t = *a.step_task;
  // The step's own numbers are the truth (srun may distribute cyclically); the plan supplies
  // this slot's GPU positions.
  RankEntry me;
  for (const auto& r : plan.ranks)
    if (r.node_rank == t.node_rank && r.local_rank == t.local_rank) me = r;
  me.rank = t.rank;
  // Slurm/jsrun may already have bound this task to its own GPUs (--gpus-per-task,
  // --gpu-bind): then the task's whole visible list is its share.
  if (step_bound_task_gpus(a, plan)) me.gpus = task_gpu_share(a.local_gpu_ids.size());
  return me;
}

namespace {

// "host:port", an IPv6 literal in brackets (gRPC's form, which TensorFlow and JAX both dial).
std::string host_port(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return fmt::format(v6 ? "[{}]:{}" : "{}:{}", host, port);
}

// TensorFlow's documented TF_CONFIG (tensorflow.org/guide/distributed_training, "Setting up the
// TF_CONFIG environment variable"; TFConfigClusterResolver reads it):
//   {"cluster":{"worker":["host:port",...]},"task":{"type":"worker","index":RANK}}
// One worker per rank in rank order, so a worker's index is its RANK. A worker's host is its node
// from the plan; on a one-node plan MASTER_ADDR, as torch gets (127.0.0.1 on a bare machine, whose
// hostname may not resolve). Its port is tf_worker_port(): derived, not held.
std::string tf_config(const RankPlan& p, const RankEntry& r) {
  nlohmann::ordered_json workers = nlohmann::ordered_json::array();
  for (const auto& w : p.ranks)
    workers.push_back(host_port(p.nodes.size() == 1 ? p.master_addr : w.host,
                                tf_worker_port(p.master_port, w.local_rank)));
  const nlohmann::ordered_json j = {{"cluster", {{"worker", std::move(workers)}}},
                                    {"task", {{"type", "worker"}, {"index", r.rank}}}};
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// What jax.distributed.initialize() reads from the environment (jax-ml/jax, read at cec06d1):
//  - JAX_COORDINATOR_ADDRESS: jax/_src/distributed.py, State.initialize(), line 77, when no
//    coordinator_address is passed. MASTER_ADDR:MASTER_PORT, the port rank 0's wrapper holds.
//  - JAX_LOCAL_DEVICE_IDS: the same function, line 81. This rank's GPUs are all it sees
//    (CUDA_VISIBLE_DEVICES), so 0..n-1; set, it keeps JAX's Slurm/Open MPI detection
//    (jax/_src/clusters/cluster.py, auto_detect_unset_distributed_params) from picking device
//    SLURM_LOCALID / OMPI_COMM_WORLD_LOCAL_RANK, which this rank's CUDA_VISIBLE_DEVICES hides.
// JAX reads no variable of its own for num_processes or process_id: only a detected cluster
// gives them (SLURM_NTASKS/SLURM_PROCID in clusters/slurm_cluster.py, OMPI_COMM_WORLD_SIZE/
// OMPI_COMM_WORLD_RANK with OMPI_MCA_orte_hnp_uri in clusters/ompi_cluster.py). gpurun does not
// fake those (Open MPI and Slurm tools in the rank would believe them); a rank passes
// num_processes=WORLD_SIZE and process_id=RANK (README, "What each rank gets").
std::vector<std::pair<std::string, std::string>> jax_environment(const RankPlan& p,
                                                                 const RankEntry& r) {
  std::vector<std::pair<std::string, std::string>> out{
      {"JAX_COORDINATOR_ADDRESS", host_port(p.master_addr, p.master_port)}};
  std::string ids;
  for (std::size_t i = 0; i < r.gpus.size(); ++i) ids += fmt::format("{}{}", i ? "," : "", i);
  if (!ids.empty()) out.emplace_back("JAX_LOCAL_DEVICE_IDS", ids);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> rank_environment(
    const RankPlan& p, const RankEntry& r, Scheduler s, const std::optional<std::string>& job_id,
    const std::optional<std::vector<std::string>>& visible) {
  std::string cvd;
  for (int pos : r.gpus) {
    if (!cvd.empty()) cvd += ',';
    if (!visible) {
      cvd += fmt::format("<{}#{}>", r.host, pos);
      continue;
    }
    if (pos >= static_cast<int>(visible->size()))
      throw Error(fmt::format(
          "rank {} needs GPU position {} on {}, but CUDA_VISIBLE_DEVICES there lists only {} "
          "GPU{} where gpurun planned {}: this node has fewer GPUs than the node gpurun planned "
          "from, or the engine set CUDA_VISIBLE_DEVICES per task (use --gpus-per-rank or "
          "--nproc-per-node)",
          r.rank, pos, r.host, visible->size(), visible->size() == 1 ? "" : "s",
          p.nodes.at(static_cast<std::size_t>(r.node_rank)).gpus));
    cvd += (*visible)[static_cast<std::size_t>(pos)];
  }
  std::vector<std::pair<std::string, std::string>> out{
      {"RANK", std::to_string(r.rank)},
      {"WORLD_SIZE", std::to_string(p.world_size)},
      {"LOCAL_RANK", std::to_string(r.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(r.local_world_size)},
      {"NODE_RANK", std::to_string(r.node_rank)},
  };
  if (p.contracts.torch) {
    out.emplace_back("GROUP_RANK", std::to_string(r.node_rank));
    out.emplace_back("MASTER_ADDR", p.master_addr);
    out.emplace_back("MASTER_PORT", std::to_string(p.master_port));
  }
  if (p.contracts.tf) out.emplace_back("TF_CONFIG", tf_config(p, r));
  if (p.contracts.jax)
    for (auto& kv : jax_environment(p, r)) out.push_back(std::move(kv));
  const std::pair<std::string, std::string> rest[] = {
      {"CUDA_VISIBLE_DEVICES", cvd},
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
      {"OMP_NUM_THREADS", std::to_string(p.cpus_per_rank)},
      {"GPURUN_SCHEDULER", to_string(s)},
      {"GPURUN_JOB_ID", job_id.value_or("")},
      {"GPURUN_STDOUT_TTY", p.stdout_tty ? "1" : "0"},
  };
  out.insert(out.end(), std::begin(rest), std::end(rest));
  // A gpuq job's batch shell has Slurm's SLURM_PROCID=0 (and LOCALID, NODEID 0, SLURM_NTASKS the
  // job's -n), and no srun gives each rank its own: frameworks that read them (Lightning's
  // SLURMEnvironment, submitit, JAX's Slurm detection) would see every rank as task 0 of the
  // job's tasks. Each rank gets its own, as srun would set them.
  if (s == Scheduler::gpuq) {
    out.emplace_back("SLURM_PROCID", std::to_string(r.rank));
    out.emplace_back("SLURM_LOCALID", std::to_string(r.local_rank));
    out.emplace_back("SLURM_NODEID", std::to_string(r.node_rank));
    out.emplace_back("SLURM_NTASKS", std::to_string(p.world_size));
    out.emplace_back("SLURM_NPROCS", std::to_string(p.world_size));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> start_environment(const Env& env,
                                                                   const StartValues& v) {
  std::vector<std::pair<std::string, std::string>> out{
      {"GPURUN_RESTART_COUNT", std::to_string(v.restart)}};
  if (v.heartbeat) out.emplace_back("GPURUN_HEARTBEAT", *v.heartbeat);
  if (!env.count("PYTHONUNBUFFERED")) out.emplace_back("PYTHONUNBUFFERED", "1");
  if (v.iface)
    for (const char* var : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"})
      if (!env.count(var)) out.emplace_back(var, *v.iface);
  if (v.python_dir) {
    auto old = env.find("PYTHONPATH");
    const bool more = old != env.end() && !old->second.empty();
    out.emplace_back("PYTHONPATH", *v.python_dir + (more ? ":" + old->second : ""));
    if (v.pystack_dir) out.emplace_back("GPURUN_PYSTACK_DIR", *v.pystack_dir);
  }
  return out;
}

}  // namespace gpurun::launcher

// rank_env.cc: the environment of one rank.
#include <fmt/format.h>

#include "alloc/env_util.h"
#include "gpurun/launcher/error.h"
#include "gpurun/launcher/launch.h"

namespace gpurun::launcher {

bool step_bound_task_gpus(const Allocation& a, const RankPlan& plan) {
  const int node_gpus = plan.nodes.at(static_cast<std::size_t>(a.step_task->node_rank)).gpus;
  return !a.local_gpu_ids.empty() && static_cast<int>(a.local_gpu_ids.size()) < node_gpus;
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
  if (step_bound_task_gpus(a, plan)) {
    me.gpus.clear();
    for (std::size_t i = 0; i < a.local_gpu_ids.size(); ++i) me.gpus.push_back(static_cast<int>(i));
  }
  return me;
}

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
          "GPU{}: the nodes of this job differ in GPU count (use --gpus-per-rank or "
          "--nproc-per-node)",
          r.rank, pos, r.host, visible->size(), visible->size() == 1 ? "" : "s"));
    cvd += (*visible)[static_cast<std::size_t>(pos)];
  }
  return {
      {"RANK", std::to_string(r.rank)},
      {"WORLD_SIZE", std::to_string(p.world_size)},
      {"LOCAL_RANK", std::to_string(r.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(r.local_world_size)},
      {"NODE_RANK", std::to_string(r.node_rank)},
      {"GROUP_RANK", std::to_string(r.node_rank)},
      {"MASTER_ADDR", p.master_addr},
      {"MASTER_PORT", std::to_string(p.master_port)},
      {"CUDA_VISIBLE_DEVICES", cvd},
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
      {"OMP_NUM_THREADS", std::to_string(p.cpus_per_rank)},
      {"GPURUN_SCHEDULER", to_string(s)},
      {"GPURUN_JOB_ID", job_id.value_or("")},
      {"GPURUN_STDOUT_TTY", p.stdout_tty ? "1" : "0"},
  };
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

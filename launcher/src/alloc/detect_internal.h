// detect_internal.h: per-scheduler readers behind detect_allocation(). Private.
#pragma once

#include <map>

#include "gpurun/launcher/allocation.h"

namespace gpurun::launcher::detail {

Allocation detect_slurm(const DetectInput& in);
Allocation detect_pbs(const DetectInput& in);
Allocation detect_lsf(const DetectInput& in);
Allocation detect_gpuq(const DetectInput& in);
Allocation detect_local(const DetectInput& in);

// An srun task's place in its step (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, checked), the
// step's nodes being `hosts` with `counts` tasks each, `tasks` in all: Slurm's srun, or gpuq's.
StepTask srun_step_task(const Env& env, const std::vector<std::string>& hosts,
                        const std::vector<int>& counts, int tasks);
// SLURM_JOB_END_TIME (UNIX seconds; 0 or unset: no limit) into a.end_time; throws on a bad value.
void read_job_end_time(const Env& env, Allocation& a);

// The GPUs of each node of a job from `scontrol -d show job`'s lines for them, one a group of
// nodes: "Nodes=node[1-2] CPU_IDs=2-3 Mem=0 GRES=gpu:1(IDX:0)" (IDX: ranges and lists, "0-1,3";
// GPU types: "gpu:a100:2(IDX:0-1)"). A node without such a line is not in the map.
std::map<std::string, int> slurm_job_gpus(const std::string& scontrol_text);

// This node's visible GPUs from CUDA_VISIBLE_DEVICES when set, else nullopt.
std::optional<std::vector<std::string>> visible_from_cvd(const Env& env);

}  // namespace gpurun::launcher::detail

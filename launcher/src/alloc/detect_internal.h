// detect_internal.h: per-scheduler readers behind detect_allocation(). Private.
#pragma once

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

// This node's visible GPUs from CUDA_VISIBLE_DEVICES when set, else nullopt.
std::optional<std::vector<std::string>> visible_from_cvd(const Env& env);

}  // namespace gpurun::launcher::detail

// detect_internal.h: per-scheduler readers behind detect_allocation(). Private.
#pragma once

#include "gpurun/launcher/allocation.h"

namespace gpurun::launcher::detail {

Allocation detect_slurm(const DetectInput& in);
Allocation detect_pbs(const DetectInput& in);
Allocation detect_lsf(const DetectInput& in);
Allocation detect_gpuq(const DetectInput& in);
Allocation detect_local(const DetectInput& in);

// This node's visible GPUs from CUDA_VISIBLE_DEVICES when set, else nullopt.
std::optional<std::vector<std::string>> visible_from_cvd(const Env& env);

}  // namespace gpurun::launcher::detail

// gpu_count.h: how many GPUs this machine has, the one count gpurun and gpuq both use (besides
// the CUDA runtime's own cudaGetDeviceCount, which only a process that runs CUDA asks).
#pragma once

#include <string>
#include <vector>

#include "gpurun/gpuinfo/gpu_sampler.h"

namespace gpurun::gpuinfo {

struct GpuCount {
  std::vector<int> ids;  // the physical GPUs' indices (a MIG device is part of its GPU)
  std::string source;    // "nvml", "nvidia-smi" or "/proc/driver/nvidia/gpus"; "" when none
  std::string why_none;  // when ids is empty: what each reader said
};

// The first reader that answers: NVML, then nvidia-smi (cfg.nvidia_smi when set, as
// GPURUN_NVIDIA_SMI sets it at the programs' edge; else the one on PATH), then the NVIDIA
// driver's one folder per GPU under PROC_ROOT/driver/nvidia/gpus. Never throws.
GpuCount count_gpus(const SamplerConfig& cfg, const std::string& proc_root = "/proc");

}  // namespace gpurun::gpuinfo

// gpu_health_nvml.h: the GPU health query's NVML backend (gpu_health.h). Private to gpuinfo.
#pragma once

#include <optional>
#include <string>

#include "gpurun/gpuinfo/gpu_health.h"

namespace gpurun::gpuinfo {

// Every GPU's health through NVML (libnvidia-ml.so.1, loaded with dlopen); nullopt when NVML
// cannot be loaded, initialised or cannot count the GPUs, *why then says which.
std::optional<HealthReport> nvml_health(std::string* why);

}  // namespace gpurun::gpuinfo

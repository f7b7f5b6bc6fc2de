// gpu_health.h: whether this machine's GPUs are fit to start a job on: uncorrected ECC errors
// since the driver loaded, device memory pages waiting to be retired, row remapping pending or
// failed, GPUs the driver lists but cannot read (fallen off the bus). Read like the sampler
// (gpu_sampler.h): NVML through dlopen, else nvidia-smi's CSV. gpurun's --preflight asks it on
// every node before any program starts.
//
// A figure the GPU does not report ("[N/A]", "[Not Supported]", NVML_ERROR_NOT_SUPPORTED: ECC
// off, row remapping before Ampere, page retirement after it) is unknown (nullopt): never 0,
// never a fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpurun/gpuinfo/gpu_sampler.h"

namespace gpurun::gpuinfo {

struct GpuHealth {
  int index = -1;                                // as nvidia-smi and NVML number it
  std::string uuid;                              // GPU-...
  std::optional<std::uint64_t> ecc_uncorrected;  // volatile count: since the driver loaded
  std::optional<bool> retired_pages_pending;     // pages retire at the next driver load
  std::optional<bool> remap_pending;             // a row remap waits for a GPU reset
  std::optional<bool> remap_failed;              // a row remap failed: the GPU needs service
};

struct HealthReport {
  std::string source;                 // "nvml" or "nvidia-smi PATH"
  std::vector<GpuHealth> gpus;        // in index order
  std::vector<std::string> problems;  // the driver's words for GPUs it could not read
};

// What is wrong with one GPU, one phrase each ("2 uncorrected ECC errors since the driver
// loaded"); empty when nothing it knows is wrong.
std::vector<std::string> health_faults(const GpuHealth& g);

// The two nvidia-smi queries, in this order (each with --format=csv,noheader,nounits). Row
// remapping has its own query (--query-remapped-rows, nvidia-smi(1) and --help-query-gpu list
// remapped_rows.* under it, not under --query-gpu), and a driver or board without it must not
// cost the ECC figures, so it is asked apart.
inline constexpr const char* kNvidiaSmiHealthFields =
    "index,uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending";
inline constexpr const char* kNvidiaSmiRemapFields =
    "gpu_uuid,remapped_rows.pending,remapped_rows.failure";

struct HealthCsv {
  std::vector<GpuHealth> gpus;
  std::vector<std::string> problems;  // lines that are not rows ("Unable to determine ...")
};
// Parses --query-gpu=kNvidiaSmiHealthFields. Never throws; a line it cannot read is kept, cut to
// 200 bytes, in problems.
HealthCsv parse_nvidia_smi_health_csv(std::string_view text);
// Parses --query-remapped-rows=kNvidiaSmiRemapFields into the GPUs of `gpus` with each row's
// UUID. Never throws; rows it cannot read, or of no GPU there, are ignored (remapping stays
// unknown).
void apply_nvidia_smi_remap_csv(std::string_view text, std::vector<GpuHealth>& gpus);

// NVML when it loads and cfg names no nvidia-smi, else nvidia-smi (cfg.nvidia_smi, or the one on
// PATH). Throws Error naming what it tried when neither answers (no driver, no tool, a tool that
// hangs past cfg.timeout_ms or prints nothing it understands).
HealthReport read_gpu_health(const SamplerConfig& cfg);

}  // namespace gpurun::gpuinfo

// gpu_health_nvml.cc: the GPU health query through NVML (gpu_health_nvml.h). The library and the
// core entry points come from nvml_library.h, like the sampler's; its own nvmlInit_v2/nvmlShutdown
// around each query (preflight runs once per node before the job). An entry point a driver lacks, or a figure a board does not
// support (NVML_ERROR_NOT_SUPPORTED), leaves that figure unknown; a GPU that answers
// NVML_ERROR_GPU_IS_LOST, or whose handle cannot be had, is named in the report's problems.
#include "gpu_health_nvml.h"

#include <fmt/format.h>

#include "nvml_library.h"

namespace gpurun::gpuinfo {
namespace {

struct Api : nvml::Core {
  nvml::DeviceGetTotalEccErrorsFn ecc = nullptr;
  nvml::DeviceGetRetiredPagesPendingStatusFn pages_pending = nullptr;
  nvml::DeviceGetRemappedRowsFn remapped_rows = nullptr;
};

// The one GPU's figures; false when the GPU is lost (its problem is in *lost).
bool read_health(const Api& api, nvml::Device d, GpuHealth& g, std::string* lost) {
  char id[nvml::kDeviceUuidBufferSize] = {0};
  nvml::Return rc = api.uuid(d, id, sizeof(id));
  if (rc == nvml::kSuccess) g.uuid = id;
  unsigned long long errors = 0;
  if (rc != nvml::kErrorGpuIsLost && api.ecc)
    if ((rc = api.ecc(d, nvml::kMemoryErrorTypeUncorrected, nvml::kVolatileEcc, &errors)) ==
        nvml::kSuccess)
      g.ecc_uncorrected = errors;
  int pending = 0;
  if (rc != nvml::kErrorGpuIsLost && api.pages_pending)
    if ((rc = api.pages_pending(d, &pending)) == nvml::kSuccess)
      g.retired_pages_pending = pending == nvml::kFeatureEnabled;
  unsigned int corr = 0, unc = 0, remap_pending = 0, failed = 0;
  if (rc != nvml::kErrorGpuIsLost && api.remapped_rows)
    if ((rc = api.remapped_rows(d, &corr, &unc, &remap_pending, &failed)) == nvml::kSuccess) {
      g.remap_pending = remap_pending != 0;
      g.remap_failed = failed != 0;
    }
  if (rc != nvml::kErrorGpuIsLost) return true;
  *lost = fmt::format("GPU {}: {}", g.index, api.error(rc));
  return false;
}

}  // namespace

std::optional<HealthReport> nvml_health(std::string* why) {
  Api api;
  if (!nvml::load_core(api, "the health query", why)) return std::nullopt;
  api.bind("nvmlDeviceGetTotalEccErrors", api.ecc);
  api.bind("nvmlDeviceGetRetiredPagesPendingStatus", api.pages_pending);
  api.bind("nvmlDeviceGetRemappedRows", api.remapped_rows);  // drivers >= 450
  nvml::Return rc = api.init();
  if (rc != nvml::kSuccess) {
    *why = fmt::format("nvmlInit failed: {}", api.error(rc));
    return std::nullopt;
  }
  HealthReport r;
  r.source = "nvml";
  unsigned int count = 0;
  if ((rc = api.count(&count)) != nvml::kSuccess) {
    *why = fmt::format("NVML cannot count GPUs: {}", api.error(rc));
    api.shutdown();
    return std::nullopt;
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvml::Device d = nullptr;
    if ((rc = api.handle(i, &d)) != nvml::kSuccess) {
      r.problems.push_back(fmt::format("GPU {}: {}", i, api.error(rc)));
      continue;
    }
    GpuHealth g;
    g.index = static_cast<int>(i);
    std::string lost;
    if (read_health(api, d, g, &lost))
      r.gpus.push_back(std::move(g));
    else
      r.problems.push_back(std::move(lost));
  }
  api.shutdown();
  return r;
}

}  // namespace gpurun::gpuinfo

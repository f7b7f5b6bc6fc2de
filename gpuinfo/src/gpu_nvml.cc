// gpu_nvml.cc: see gpu_nvml.h. Calls are looked up by name (nvml_abi.h has their types); a figure
// a device does not support is left unset, and a device that fails to answer (GPU_IS_LOST) is
// named in the snapshot's problems instead of failing the whole sample.
#include "gpu_nvml.h"

#include <fmt/format.h>

#include <vector>

#include "gpurun/common/error.h"
#include "nvml_library.h"

namespace gpurun::gpuinfo {

using common::Error;

struct NvmlBackend::Api : nvml::Core {
  nvml::DeviceGetStringFn name = nullptr;
  nvml::DeviceGetUtilizationRatesFn utilization = nullptr;
  nvml::DeviceGetMemoryInfoFn memory = nullptr;
  nvml::DeviceGetPowerUsageFn power = nullptr;
  nvml::DeviceGetTemperatureFn temperature = nullptr;
  // MIG entry points exist only in drivers >= 450; without them MIG devices are not listed.
  nvml::DeviceGetMigModeFn mig_mode = nullptr;
  nvml::DeviceGetMaxMigDeviceCountFn max_mig = nullptr;
  nvml::DeviceGetMigDeviceHandleByIndexFn mig_handle = nullptr;
  nvml::DeviceGetComputeRunningProcessesFn compute_processes = nullptr;  // drivers >= 470
};

namespace {

// The figures of one device (a GPU or a MIG device); unsupported ones stay unset. False when the
// device answers NVML_ERROR_GPU_IS_LOST (a handle to it can still be had): *lost says so.
bool read_figures(const NvmlBackend::Api& api, nvml::Device d, GpuSample& g, bool mig_mode,
                  std::string* lost) {
  nvml::Return rc = nvml::kSuccess;
  auto answered = [&](nvml::Return r) {
    rc = r == nvml::kErrorGpuIsLost ? r : rc;
    return r == nvml::kSuccess;
  };
  char text[nvml::kDeviceNameBufferSize] = {0};
  if (answered(api.name(d, text, sizeof(text)))) g.name = text;
  char id[nvml::kDeviceUuidBufferSize] = {0};
  if (answered(api.uuid(d, id, sizeof(id)))) g.uuid = id;
  nvml::Utilization u{};
  if (!mig_mode && answered(api.utilization(d, &u))) g.util_percent = u.gpu;
  nvml::Memory m{};
  if (answered(api.memory(d, &m))) {
    g.mem_used_mib = static_cast<double>(m.used) / (1024.0 * 1024.0);
    g.mem_total_mib = static_cast<double>(m.total) / (1024.0 * 1024.0);
  }
  unsigned int v = 0;
  if (g.mig < 0 && answered(api.power(d, &v))) g.power_w = v / 1000.0;
  if (g.mig < 0 && answered(api.temperature(d, nvml::kTemperatureGpu, &v))) g.temp_c = v;
  if (rc != nvml::kErrorGpuIsLost) return true;
  *lost = g.mig < 0 ? fmt::format("GPU {}: {}", g.index, api.error(rc))
                    : fmt::format("GPU {} MIG device {}: {}", g.index, g.mig, api.error(rc));
  return false;
}

// The compute processes on one GPU: asked with room for 64, then again with the count NVML says.
void read_processes(const NvmlBackend::Api& api, nvml::Device d, const GpuSample& g,
                    GpuSnapshot& out) {
  std::vector<nvml::ProcessInfoV2> infos(64);
  nvml::Return rc = nvml::kErrorInsufficientSize;
  for (int attempt = 0; attempt < 3 && rc == nvml::kErrorInsufficientSize; ++attempt) {
    unsigned int n = static_cast<unsigned int>(infos.size());
    rc = api.compute_processes(d, &n, infos.data());
    if (rc == nvml::kErrorInsufficientSize) infos.resize(n + 16);
    else infos.resize(rc == nvml::kSuccess ? n : 0);
  }
  if (rc != nvml::kSuccess) {
    out.processes_read = false;
    out.processes_error = fmt::format("GPU {}: compute processes: {}", g.index, api.error(rc));
    return;
  }
  for (const auto& p : infos)
    out.processes.push_back(
        {g.index, g.uuid, static_cast<int>(p.pid),
         p.usedGpuMemory == nvml::kValueNotAvailable
             ? std::nullopt
             : std::optional<double>(static_cast<double>(p.usedGpuMemory) / (1024.0 * 1024.0))});
}

}  // namespace

NvmlBackend::NvmlBackend(std::unique_ptr<Api> api) : api_(std::move(api)) {}

NvmlBackend::~NvmlBackend() {
  api_->shutdown();
  // The library stays loaded: NVML does not support being unloaded and loaded again.
}

std::unique_ptr<NvmlBackend> NvmlBackend::open(std::string* why) {
  auto api = std::make_unique<Api>();
  if (!nvml::load_core(*api, "the sampler", why)) return nullptr;
  bool ok = api->bind("nvmlDeviceGetName", api->name) &&
            api->bind("nvmlDeviceGetUtilizationRates", api->utilization) &&
            api->bind("nvmlDeviceGetMemoryInfo", api->memory) &&
            api->bind("nvmlDeviceGetPowerUsage", api->power) &&
            api->bind("nvmlDeviceGetTemperature", api->temperature);
  if (!ok) {
    *why = "libnvidia-ml.so.1 lacks an NVML entry point the sampler needs (driver too old?)";
    return nullptr;
  }
  api->bind("nvmlDeviceGetMigMode", api->mig_mode);
  api->bind("nvmlDeviceGetMaxMigDeviceCount", api->max_mig);
  api->bind("nvmlDeviceGetMigDeviceHandleByIndex", api->mig_handle);
  api->bind("nvmlDeviceGetComputeRunningProcesses_v2", api->compute_processes);
  nvml::Return rc = api->init();
  if (rc != nvml::kSuccess) {
    *why = fmt::format("nvmlInit failed: {}", api->error(rc));
    return nullptr;
  }
  return std::unique_ptr<NvmlBackend>(new NvmlBackend(std::move(api)));
}

void NvmlBackend::sample(GpuSnapshot& out, bool processes) {
  const Api& api = *api_;
  out.processes_read = processes && api.compute_processes;
  if (processes && !api.compute_processes)
    out.processes_error = "libnvidia-ml.so.1 lacks nvmlDeviceGetComputeRunningProcesses_v2";
  unsigned int count = 0;
  nvml::Return rc = api.count(&count);
  if (rc != nvml::kSuccess) throw Error(fmt::format("NVML: cannot count GPUs: {}", api.error(rc)));
  for (unsigned int i = 0; i < count; ++i) {
    nvml::Device d = nullptr;
    rc = api.handle(i, &d);
    if (rc != nvml::kSuccess) {
      out.problems.push_back(fmt::format("GPU {}: {}", i, api.error(rc)));
      continue;
    }
    GpuSample g;
    g.index = static_cast<int>(i);
    unsigned int current = 0, pending = 0;
    bool mig = api.mig_mode && api.mig_mode(d, &current, &pending) == nvml::kSuccess &&
               current == nvml::kDeviceMigEnable;
    std::string lost;
    if (!read_figures(api, d, g, mig, &lost)) {
      out.problems.push_back(std::move(lost));
      continue;
    }
    if (out.processes_read) read_processes(api, d, g, out);
    out.gpus.push_back(g);
    unsigned int slots = 0;
    if (!mig || !api.max_mig || !api.mig_handle || api.max_mig(d, &slots) != nvml::kSuccess)
      continue;
    for (unsigned int k = 0; k < slots; ++k) {
      nvml::Device md = nullptr;
      if (api.mig_handle(d, k, &md) != nvml::kSuccess) continue;  // an empty slot: NOT_FOUND
      GpuSample m;
      m.index = g.index;
      m.mig = static_cast<int>(k);
      std::string lost;
      if (read_figures(api, md, m, true, &lost))
        out.gpus.push_back(std::move(m));
      else
        out.problems.push_back(std::move(lost));
    }
  }
}

}  // namespace gpurun::gpuinfo

// gpu_nvml.cc: see gpu_nvml.h. Calls are looked up by name (nvml_abi.h has their types); a figure
// a device does not support is left unset, and a device that fails to answer (GPU_IS_LOST) is
// named in the snapshot's problems instead of failing the whole sample.
#include "gpu_nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <vector>

#include "gpurun/common/error.h"
#include "nvml_abi.h"

namespace gpurun::gpuinfo {

using common::Error;

struct NvmlBackend::Api {
  void* lib = nullptr;
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DeviceGetCountFn count = nullptr;
  nvml::DeviceGetHandleByIndexFn handle = nullptr;
  nvml::DeviceGetStringFn name = nullptr;
  nvml::DeviceGetStringFn uuid = nullptr;
  nvml::DeviceGetUtilizationRatesFn utilization = nullptr;
  nvml::DeviceGetMemoryInfoFn memory = nullptr;
  nvml::DeviceGetPowerUsageFn power = nullptr;
  nvml::DeviceGetTemperatureFn temperature = nullptr;
  // MIG entry points exist only in drivers >= 450; without them MIG devices are not listed.
  nvml::DeviceGetMigModeFn mig_mode = nullptr;
  nvml::DeviceGetMaxMigDeviceCountFn max_mig = nullptr;
  nvml::DeviceGetMigDeviceHandleByIndexFn mig_handle = nullptr;
  nvml::DeviceGetComputeRunningProcessesFn compute_processes = nullptr;  // drivers >= 470

  std::string error(nvml::Return rc) const {
    const char* s = error_string ? error_string(rc) : nullptr;
    return s ? s : fmt::format("NVML error {}", rc);
  }
};

namespace {

template <typename Fn>
bool bind(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

// The figures of one device (a GPU or a MIG device); unsupported ones stay unset.
void read_figures(const NvmlBackend::Api& api, nvml::Device d, GpuSample& g, bool mig_mode) {
  char text[nvml::kDeviceNameBufferSize] = {0};
  if (api.name(d, text, sizeof(text)) == nvml::kSuccess) g.name = text;
  char id[nvml::kDeviceUuidBufferSize] = {0};
  if (api.uuid(d, id, sizeof(id)) == nvml::kSuccess) g.uuid = id;
  nvml::Utilization u{};
  if (!mig_mode && api.utilization(d, &u) == nvml::kSuccess) g.util_percent = u.gpu;
  nvml::Memory m{};
  if (api.memory(d, &m) == nvml::kSuccess) {
    g.mem_used_mib = static_cast<double>(m.used) / (1024.0 * 1024.0);
    g.mem_total_mib = static_cast<double>(m.total) / (1024.0 * 1024.0);
  }
  unsigned int v = 0;
  if (g.mig < 0 && api.power(d, &v) == nvml::kSuccess) g.power_w = v / 1000.0;
  if (g.mig < 0 && api.temperature(d, nvml::kTemperatureGpu, &v) == nvml::kSuccess) g.temp_c = v;
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
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    const char* e = dlerror();
    *why = fmt::format("libnvidia-ml.so.1 cannot be loaded ({})", e ? e : "?");
    return nullptr;
  }
  void* l = api->lib;
  bool ok = bind(l, "nvmlInit_v2", api->init) && bind(l, "nvmlShutdown", api->shutdown) &&
            bind(l, "nvmlErrorString", api->error_string) &&
            bind(l, "nvmlDeviceGetCount_v2", api->count) &&
            bind(l, "nvmlDeviceGetHandleByIndex_v2", api->handle) &&
            bind(l, "nvmlDeviceGetName", api->name) && bind(l, "nvmlDeviceGetUUID", api->uuid) &&
            bind(l, "nvmlDeviceGetUtilizationRates", api->utilization) &&
            bind(l, "nvmlDeviceGetMemoryInfo", api->memory) &&
            bind(l, "nvmlDeviceGetPowerUsage", api->power) &&
            bind(l, "nvmlDeviceGetTemperature", api->temperature);
  if (!ok) {
    *why = "libnvidia-ml.so.1 lacks an NVML entry point the sampler needs (driver too old?)";
    return nullptr;
  }
  bind(l, "nvmlDeviceGetMigMode", api->mig_mode);
  bind(l, "nvmlDeviceGetMaxMigDeviceCount", api->max_mig);
  bind(l, "nvmlDeviceGetMigDeviceHandleByIndex", api->mig_handle);
  bind(l, "nvmlDeviceGetComputeRunningProcesses_v2", api->compute_processes);
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
    read_figures(api, d, g, mig);
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
      read_figures(api, md, m, true);
      out.gpus.push_back(std::move(m));
    }
  }
}

}  // namespace gpurun::gpuinfo

// nvml_standin.cc: a strict stand-in for libnvidia-ml.so.1, built under that name into a test
// folder, so that the GPU sampler's and the health query's NVML paths (gpuinfo/src/gpu_nvml.cc,
// gpu_health_nvml.cc) run on a machine without a GPU. It is not NVML: it answers from a JSON
// fixture, never from hardware, and a figure from it is never a GPU measurement.
//
// The fixture is the file $GPURUN_NVML_STANDIN names, read at each first nvmlInit_v2:
//   {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...", "util": 37, "mem_util": 5,
//              "mem_total_mib": 81559, "mem_used_mib": 1024, "power_mw": 123456, "temp_c": 45,
//              "processes": [{"pid": 4242, "used_mib": 500}], "ecc_uncorrected": 0,
//              "retired_pending": false, "remap_pending": false, "remap_failed": false,
//              "lost": false, "not_supported": ["power", "ecc", ...]}]}
// Strict where NVML is: every call but nvmlInit_v2 and nvmlErrorString needs an initialised
// library (NVML_ERROR_UNINITIALIZED), nvmlShutdown one more than nvmlInit_v2 is an error, a handle
// it did not hand out is NVML_ERROR_INVALID_ARGUMENT, a buffer too small for a string or a process
// list is NVML_ERROR_INSUFFICIENT_SIZE (with the count needed), a "lost" GPU answers every query
// with NVML_ERROR_GPU_IS_LOST, and a field in "not_supported" with NVML_ERROR_NOT_SUPPORTED.
// gpurun_nvml_standin_inits() (not NVML's) says how many initialisations are open.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using Return = int;
constexpr Return kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3,
                 kInsufficientSize = 7, kGpuIsLost = 15, kUnknown = 999;

struct Device {
  nlohmann::json fixture;
  bool has(const char* field) const { return fixture.contains(field); }
  bool unsupported(const char* field) const {
    for (const auto& f : fixture.value("not_supported", nlohmann::json::array()))
      if (f == field) return true;
    return false;
  }
};

std::mutex mu;
int inits = 0;
std::vector<Device> devices;
std::string last_error;

Return load_fixture() {
  const char* path = std::getenv("GPURUN_NVML_STANDIN");
  std::ifstream in(path ? path : "");
  if (!in) {
    last_error =
        std::string("NVML stand-in: no fixture (GPURUN_NVML_STANDIN=") + (path ? path : "") + ")";
    return kUnknown;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    devices.clear();
    for (const auto& g : j.at("gpus")) devices.push_back({g});
  } catch (const std::exception& e) {
    last_error = std::string("NVML stand-in: bad fixture: ") + e.what();
    return kUnknown;
  }
  return kSuccess;
}

// The device behind a handle, or nullptr when the handle is not one this library handed out.
Device* device(void* handle) {
  for (Device& d : devices)
    if (handle == &d) return &d;
  return nullptr;
}

// The checks every device query makes first: initialised, a handle of ours, not lost, supported.
Return check(void* handle, const char* field, Device** out) {
  if (inits == 0) return kUninitialized;
  Device* d = device(handle);
  if (!d) return kInvalidArgument;
  if (d->fixture.value("lost", false)) return kGpuIsLost;
  if (d->unsupported(field)) return kNotSupported;
  *out = d;
  return kSuccess;
}

Return copy_string(const std::string& s, char* buf, unsigned int length) {
  if (!buf) return kInvalidArgument;
  if (s.size() + 1 > length) return kInsufficientSize;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return kSuccess;
}

struct Utilization {
  unsigned int gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfoV2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

}  // namespace

extern "C" {

int gpurun_nvml_standin_inits() {
  std::lock_guard<std::mutex> lock(mu);
  return inits;
}

Return nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(mu);
  if (inits == 0) {
    const Return rc = load_fixture();
    if (rc != kSuccess) return rc;
  }
  ++inits;
  return kSuccess;
}

Return nvmlShutdown() {
  std::lock_guard<std::mutex> lock(mu);
  if (inits == 0) return kUninitialized;
  --inits;
  return kSuccess;
}

const char* nvmlErrorString(Return rc) {
  switch (rc) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kInsufficientSize:
      return "Insufficient Size";
    case kGpuIsLost:
      return "GPU is lost";
    default:
      return last_error.empty() ? "Unknown Error" : last_error.c_str();
  }
}

Return nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard<std::mutex> lock(mu);
  if (inits == 0) return kUninitialized;
  if (!count) return kInvalidArgument;
  *count = static_cast<unsigned int>(devices.size());
  return kSuccess;
}

Return nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** handle) {
  std::lock_guard<std::mutex> lock(mu);
  if (inits == 0) return kUninitialized;
  if (!handle || index >= devices.size()) return kInvalidArgument;
  *handle = &devices[index];
  return kSuccess;
}

Return nvmlDeviceGetName(void* h, char* name, unsigned int length) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "name", &d)) return rc;
  return copy_string(d->fixture.value("name", "NVIDIA stand-in"), name, length);
}

Return nvmlDeviceGetUUID(void* h, char* uuid, unsigned int length) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "uuid", &d)) return rc;
  return copy_string(d->fixture.at("uuid").get<std::string>(), uuid, length);
}

Return nvmlDeviceGetUtilizationRates(void* h, Utilization* u) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "util", &d)) return rc;
  if (!u) return kInvalidArgument;
  *u = {d->fixture.value("util", 0u), d->fixture.value("mem_util", 0u)};
  return kSuccess;
}

Return nvmlDeviceGetMemoryInfo(void* h, Memory* m) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "memory", &d)) return rc;
  if (!m) return kInvalidArgument;
  const unsigned long long total = d->fixture.value("mem_total_mib", 0ULL) * kMiB;
  const unsigned long long used = d->fixture.value("mem_used_mib", 0ULL) * kMiB;
  *m = {total, total - used, used};
  return kSuccess;
}

Return nvmlDeviceGetPowerUsage(void* h, unsigned int* mw) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "power", &d)) return rc;
  if (!mw) return kInvalidArgument;
  *mw = d->fixture.value("power_mw", 0u);
  return kSuccess;
}

Return nvmlDeviceGetTemperature(void* h, int sensor, unsigned int* c) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "temp", &d)) return rc;
  if (!c || sensor != 0) return kInvalidArgument;  // NVML_TEMPERATURE_GPU only
  *c = d->fixture.value("temp_c", 0u);
  return kSuccess;
}

Return nvmlDeviceGetMigMode(void* h, unsigned int* current, unsigned int* pending) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "mig", &d)) return rc;
  if (!current || !pending) return kInvalidArgument;
  *current = *pending = 0;  // MIG disabled: the stand-in has no MIG devices
  return kSuccess;
}

Return nvmlDeviceGetComputeRunningProcesses_v2(void* h, unsigned int* count, ProcessInfoV2* infos) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "processes", &d)) return rc;
  if (!count) return kInvalidArgument;
  const auto procs = d->fixture.value("processes", nlohmann::json::array());
  if (*count < procs.size() || (!infos && !procs.empty())) {
    *count = static_cast<unsigned int>(procs.size());
    return kInsufficientSize;
  }
  *count = static_cast<unsigned int>(procs.size());
  for (unsigned int i = 0; i < *count; ++i) {
    const auto& p = procs[i];
    infos[i] = {p.at("pid").get<unsigned int>(),
                p.contains("used_mib") ? p["used_mib"].get<unsigned long long>() * kMiB : ~0ULL,
                ~0u, ~0u};
  }
  return kSuccess;
}

Return nvmlDeviceGetTotalEccErrors(void* h, int type, int counter, unsigned long long* n) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "ecc", &d)) return rc;
  if (!n || type != 1 || counter != 0) return kInvalidArgument;  // uncorrected, volatile only
  *n = d->fixture.value("ecc_uncorrected", 0ULL);
  return kSuccess;
}

Return nvmlDeviceGetRetiredPagesPendingStatus(void* h, int* pending) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "retired_pages", &d)) return rc;
  if (!pending) return kInvalidArgument;
  *pending = d->fixture.value("retired_pending", false) ? 1 : 0;
  return kSuccess;
}

Return nvmlDeviceGetRemappedRows(void* h, unsigned int* corr, unsigned int* unc,
                                 unsigned int* pending, unsigned int* failed) {
  std::lock_guard<std::mutex> lock(mu);
  Device* d = nullptr;
  if (Return rc = check(h, "remapped_rows", &d)) return rc;
  if (!corr || !unc || !pending || !failed) return kInvalidArgument;
  *corr = *unc = 0;
  *pending = d->fixture.value("remap_pending", false) ? 1 : 0;
  *failed = d->fixture.value("remap_failed", false) ? 1 : 0;
  return kSuccess;
}

}  // extern "C"

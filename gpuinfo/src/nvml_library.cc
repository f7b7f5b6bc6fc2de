// nvml_library.cc: see nvml_library.h.
#include "nvml_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

namespace gpurun::gpuinfo::nvml {

std::string Core::error(Return rc) const {
  const char* s = error_string ? error_string(rc) : nullptr;
  return s ? s : fmt::format("NVML error {}", rc);
}

void* Core::symbol(const char* name) const {
  return lib ? dlsym(lib, name) : nullptr;
}

bool load_core(Core& core, const char* user, std::string* why) {
  static std::string load_error;
  static void* const lib = [] {
    void* l = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!l) {
      const char* e = dlerror();
      load_error = fmt::format("libnvidia-ml.so.1 cannot be loaded ({})", e ? e : "?");
    }
    return l;
  }();
  if (!lib) {
    *why = load_error;
    return false;
  }
  core.lib = lib;
  if (core.bind("nvmlInit_v2", core.init) && core.bind("nvmlShutdown", core.shutdown) &&
      core.bind("nvmlErrorString", core.error_string) &&
      core.bind("nvmlDeviceGetCount_v2", core.count) &&
      core.bind("nvmlDeviceGetHandleByIndex_v2", core.handle) &&
      core.bind("nvmlDeviceGetUUID", core.uuid))
    return true;
  *why =
      fmt::format("libnvidia-ml.so.1 lacks an NVML entry point {} needs (driver too old?)", user);
  return false;
}

}  // namespace gpurun::gpuinfo::nvml

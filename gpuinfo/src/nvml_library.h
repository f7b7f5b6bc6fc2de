// nvml_library.h: libnvidia-ml.so.1, loaded once with dlopen and never unloaded (NVML does not
// support being unloaded and loaded again), and the entry points every NVML user here binds: the
// sampler (gpu_nvml.cc) and the health query (gpu_health_nvml.cc). Each keeps its own Core and
// its own nvmlInit_v2/nvmlShutdown: NVML counts its initialisations, so both may be open at once.
// Private to gpuinfo.
#pragma once

#include <string>

#include "nvml_abi.h"

namespace gpurun::gpuinfo::nvml {

struct Core {
  void* lib = nullptr;
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  DeviceGetCountFn count = nullptr;
  DeviceGetHandleByIndexFn handle = nullptr;
  DeviceGetStringFn uuid = nullptr;

  std::string error(Return rc) const;  // nvmlErrorString's words, or "NVML error N"
  // Binds `fn` to the entry point `name`; false (fn null) when the library lacks it.
  template <typename Fn>
  bool bind(const char* name, Fn& fn) const {
    fn = reinterpret_cast<Fn>(symbol(name));
    return fn != nullptr;
  }

 private:
  void* symbol(const char* name) const;
};

// Loads the library (once per process) and binds the core entry points; false, with *why, when
// it cannot be loaded or lacks one. `user` says who needs them ("the sampler").
bool load_core(Core& core, const char* user, std::string* why);

}  // namespace gpurun::gpuinfo::nvml

// nvml_abi.h: the part of NVML's C interface the GPU sampler calls, declared here because the
// CUDA toolkit on the build machines (pip-assembled) ships no nvml.h and Debian has it only in
// non-free. Values and layouts are NVML's stable ABI, as in the NVML API Reference
// (docs.nvidia.com/deploy/nvml-api: nvmlReturn_t, nvmlUtilization_t, nvmlMemory_t,
// NVML_TEMPERATURE_GPU, NVML_DEVICE_MIG_ENABLE, the *_v2 entry points). Where CMake finds the
// real nvml.h, nvml_abi_check.cc compares every declaration here with it at compile time.
// Private to the launcher; the functions are looked up with dlsym, never linked.
#pragma once

namespace gpurun::gpuinfo::nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorNotFound = 6;
constexpr Return kErrorGpuIsLost = 15;

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct Memory {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_v2_t, filled by nvmlDeviceGetComputeRunningProcesses_v2. The _v3 entry point's
// struct gained a field in some releases and not others, so gpuq calls _v2, whose layout is fixed.
struct ProcessInfoV2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // kValueNotAvailable where the driver cannot tell
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE
constexpr Return kErrorInsufficientSize = 7;               // NVML_ERROR_INSUFFICIENT_SIZE

constexpr int kTemperatureGpu = 0;              // NVML_TEMPERATURE_GPU
constexpr unsigned kDeviceMigEnable = 1;        // NVML_DEVICE_MIG_ENABLE
constexpr unsigned kDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kDeviceUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
// The health query (gpu_health_nvml.cc).
constexpr int kMemoryErrorTypeUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;                 // NVML_VOLATILE_ECC
constexpr int kFeatureEnabled = 1;              // NVML_FEATURE_ENABLED (nvmlEnableState_t)

// Signatures of the entry points, by their exported names.
using InitFn = Return (*)();                                         // nvmlInit_v2
using ShutdownFn = Return (*)();                                     // nvmlShutdown
using ErrorStringFn = const char* (*)(Return);                       // nvmlErrorString
using DeviceGetCountFn = Return (*)(unsigned int*);                  // nvmlDeviceGetCount_v2
using DeviceGetHandleByIndexFn = Return (*)(unsigned int, Device*);  // ..._v2
using DeviceGetIndexFn = Return (*)(Device, unsigned int*);
using DeviceGetStringFn = Return (*)(Device, char*, unsigned int);  // GetName, GetUUID
using DeviceGetUtilizationRatesFn = Return (*)(Device, Utilization*);
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);
using DeviceGetPowerUsageFn = Return (*)(Device, unsigned int*);  // milliwatts
using DeviceGetTemperatureFn = Return (*)(Device, int, unsigned int*);
using DeviceGetMigModeFn = Return (*)(Device, unsigned int*, unsigned int*);
using DeviceGetMaxMigDeviceCountFn = Return (*)(Device, unsigned int*);
using DeviceGetMigDeviceHandleByIndexFn = Return (*)(Device, unsigned int, Device*);
using DeviceGetComputeRunningProcessesFn = Return (*)(Device, unsigned int*,
                                                      ProcessInfoV2*);  // ..._v2
// nvmlDeviceGetTotalEccErrors(device, nvmlMemoryErrorType_t, nvmlEccCounterType_t, count)
using DeviceGetTotalEccErrorsFn = Return (*)(Device, int, int, unsigned long long*);
// nvmlDeviceGetRetiredPagesPendingStatus(device, nvmlEnableState_t* isPending)
using DeviceGetRetiredPagesPendingStatusFn = Return (*)(Device, int*);
// nvmlDeviceGetRemappedRows(device, corrRows, uncRows, isPending, failureOccurred)
using DeviceGetRemappedRowsFn = Return (*)(Device, unsigned int*, unsigned int*, unsigned int*,
                                           unsigned int*);

}  // namespace gpurun::gpuinfo::nvml

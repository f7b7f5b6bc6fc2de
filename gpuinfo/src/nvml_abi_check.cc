// nvml_abi_check.cc: compiled only where CMake finds NVML's own nvml.h. It checks, at compile
// time, that the declarations gpu_nvml.cc calls through (nvml_abi.h) match the real header: return
// codes, constants, struct layouts and entry-point signatures. It defines nothing.
// nvmlDeviceGetTemperature is deprecated from NVML 13 (nvmlDeviceGetTemperatureV replaces it)
// but still exported, and older drivers have only it, so the sampler keeps calling it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <nvml.h>

#include <cstddef>
#include <type_traits>

#include "nvml_abi.h"

namespace n = gpurun::gpuinfo::nvml;

static_assert(sizeof(nvmlReturn_t) == sizeof(n::Return));
static_assert(NVML_SUCCESS == n::kSuccess);
static_assert(NVML_ERROR_NOT_SUPPORTED == n::kErrorNotSupported);
static_assert(NVML_ERROR_NOT_FOUND == n::kErrorNotFound);
static_assert(NVML_ERROR_GPU_IS_LOST == n::kErrorGpuIsLost);
static_assert(NVML_TEMPERATURE_GPU == n::kTemperatureGpu);
static_assert(sizeof(nvmlTemperatureSensors_t) == sizeof(int));
static_assert(NVML_DEVICE_MIG_ENABLE == n::kDeviceMigEnable);
static_assert(NVML_DEVICE_NAME_V2_BUFFER_SIZE == n::kDeviceNameBufferSize);
static_assert(NVML_DEVICE_UUID_V2_BUFFER_SIZE == n::kDeviceUuidBufferSize);
static_assert(NVML_MEMORY_ERROR_TYPE_UNCORRECTED == n::kMemoryErrorTypeUncorrected);
static_assert(NVML_VOLATILE_ECC == n::kVolatileEcc);
static_assert(NVML_FEATURE_ENABLED == n::kFeatureEnabled);
static_assert(sizeof(nvmlMemoryErrorType_t) == sizeof(int));
static_assert(sizeof(nvmlEccCounterType_t) == sizeof(int));
static_assert(sizeof(nvmlEnableState_t) == sizeof(int));

static_assert(sizeof(nvmlUtilization_t) == sizeof(n::Utilization));
static_assert(offsetof(nvmlUtilization_t, gpu) == offsetof(n::Utilization, gpu));
static_assert(offsetof(nvmlUtilization_t, memory) == offsetof(n::Utilization, memory));
static_assert(sizeof(nvmlMemory_t) == sizeof(n::Memory));
static_assert(offsetof(nvmlMemory_t, total) == offsetof(n::Memory, total));
static_assert(offsetof(nvmlMemory_t, used) == offsetof(n::Memory, used));
static_assert(sizeof(nvmlDevice_t) == sizeof(n::Device));

// The real signatures, spelled with NVML's own types; nvml_abi.h's differ only by int for enums.
static_assert(std::is_same_v<decltype(&nvmlInit_v2), nvmlReturn_t (*)()>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCount_v2), nvmlReturn_t (*)(unsigned int*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetHandleByIndex_v2),
                             nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetName),
                             nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUUID),
                             nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUtilizationRates),
                             nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMemoryInfo),
                             nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPowerUsage),
                             nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetTemperature),
                   nvmlReturn_t (*)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigMode),
                             nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMaxMigDeviceCount),
                             nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigDeviceHandleByIndex),
                             nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlDevice_t*)>);

// Compute processes: the _v2 entry point and its struct, whose layout stayed fixed.
static_assert(NVML_VALUE_NOT_AVAILABLE == n::kValueNotAvailable);
static_assert(NVML_ERROR_INSUFFICIENT_SIZE == n::kErrorInsufficientSize);
static_assert(sizeof(nvmlProcessInfo_v2_t) == sizeof(n::ProcessInfoV2));
static_assert(offsetof(nvmlProcessInfo_v2_t, pid) == offsetof(n::ProcessInfoV2, pid));
static_assert(offsetof(nvmlProcessInfo_v2_t, usedGpuMemory) ==
              offsetof(n::ProcessInfoV2, usedGpuMemory));
static_assert(std::is_same_v<decltype(&nvmlDeviceGetComputeRunningProcesses_v2),
                             nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v2_t*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTotalEccErrors),
                             nvmlReturn_t (*)(nvmlDevice_t, nvmlMemoryErrorType_t,
                                              nvmlEccCounterType_t, unsigned long long*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetRetiredPagesPendingStatus),
                             nvmlReturn_t (*)(nvmlDevice_t, nvmlEnableState_t*)>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetRemappedRows),
                             nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*,
                                              unsigned int*, unsigned int*)>);

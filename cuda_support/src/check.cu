// check.cu: the messages of check.cuh's macros and the device-lost flag. Host code only; a .cu
// file so that the stand-in build compiles it as the other CUDA sources are.
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "gpurun/cuda_support/check.cuh"

namespace gpurun::cuda_support {

[[noreturn]] void fail(const char* lib, const std::string& what, const char* expr, const char* file,
                       int line) {
  // A failed runtime call is also the thread's last error until cudaGetLastError reads it: left
  // there, the next launch check (GPURUN_LAUNCH_CHECK) would report it again as its own, after
  // this one was caught (first seen on an H200: a caught cudaEventRecordWithFlags failure made
  // the next test's first launch fail). A library's failure may come of one too.
  (void)cudaGetLastError();
  int dev = -1;
  cudaGetDevice(&dev);  // best effort: the message is what matters
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  throw std::runtime_error(std::string(lib) + " error: " + expr + " failed at " + file + ":" +
                           std::to_string(line) + " on device " + std::to_string(dev) + " (" +
                           host + "): " + what);
}

namespace {
std::atomic<bool> g_device_lost{false};
}  // namespace

void mark_device_lost() noexcept {
  g_device_lost.store(true);
}
bool device_lost() noexcept {
  return g_device_lost.load();
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "unknown cuBLAS status";
  }
}

}  // namespace gpurun::cuda_support

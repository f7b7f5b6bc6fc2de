// gpu_test_util.h: what the GPU tests share: whether a device is there (gpu_test_main.cc turns
// "absent" into exit code 77, CTest's skip: the whole binary is skipped, and on a machine with a
// device nothing is; a device there but unusable fails), and move-only device vectors for host <->
// device round trips. Used by tests/kernels/cuda and tests/runtime/cuda.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpurun/cuda_support/owners.h"
#include "gpurun/kernels/device_probe.h"

namespace gpurun::testing {

// Whether this process has a CUDA device: kAbsent (no driver at all, as on CI, or no device:
// the tests skip), kBroken (a driver or device is there but unusable: a driver older than the
// runtime, a busy or lost device, no kernel image for this GPU: the tests fail, never skip), or
// kUsable. `why` says which and how.
enum class DeviceState { kAbsent, kBroken, kUsable };
inline DeviceState device_state(std::string& why) {
  int n = 0, driver = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    const bool no_driver = e == cudaErrorInsufficientDriver &&
                           cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0;
    if (e == cudaErrorNoDevice || no_driver) {
      why = "no CUDA device (" + why + ")";
      return DeviceState::kAbsent;
    }
    why = "a CUDA driver is installed (CUDA " + std::to_string(driver / 1000) + "." +
          std::to_string(driver % 1000 / 10) + ") but cudaGetDeviceCount failed: " + why;
    return DeviceState::kBroken;
  }
  if (n == 0) {
    why = "no CUDA device (cudaGetDeviceCount = 0)";
    return DeviceState::kAbsent;
  }
  if (gpurun::kernels::cuda_device_count() == 0) {
    why = std::to_string(n) + " CUDA device(s) listed, but the probe kernel failed on device 0 " +
          "(no kernel image for this GPU's architecture? out of memory?)";
    return DeviceState::kBroken;
  }
  why.clear();
  return DeviceState::kUsable;
}

// Exact-sum inputs, nccl-tests style: rank r's value at i is (r + 1) * (i % 97); the sum over n
// ranks is (i % 97) * n(n+1)/2, an integer below 2^24 for n <= 64, so FP32 addition is exact in
// any order and any wrong value is a real error.
inline float exact_sum_input(int rank, std::size_t i) {
  return float((rank + 1) * int(i % 97));
}

// How many of `got` differ from the exact sum over `nranks` ranks.
inline std::size_t count_wrong_sums(const std::vector<float>& got, int nranks) {
  std::size_t bad = 0;
  const float tri = float(nranks * (nranks + 1) / 2);
  for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != float(i % 97) * tri;
  return bad;
}

// Exit code 77 (CTest's SKIP_RETURN_CODE) with the reason printed when there is no device, exit
// code 1 with the reason when one is there but unusable; returns when it is usable. Every GPU
// test program calls it first.
void exit_77_without_a_device();

// A device buffer (cuda_support's DeviceBuffer, zeroed on the legacy stream) with host round
// trips: from a host vector, and back with host().
template <typename T>
class DeviceVec {
 public:
  explicit DeviceVec(const std::vector<T>& h) : buf_(h.size(), nullptr) {
    EXPECT_EQ(cudaMemcpy(get(), h.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit DeviceVec(std::size_t n) : buf_(n, nullptr) {}
  T* get() const { return buf_.get(); }
  std::size_t bytes() const { return buf_.bytes(); }
  std::vector<T> host() const {
    std::vector<T> h(buf_.size());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), get(), bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  cuda_support::DeviceBuffer<T> buf_;
};

}  // namespace gpurun::testing

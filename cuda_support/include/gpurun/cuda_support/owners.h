// owners.h: move-only RAII owners of CUDA runtime objects, for the kernels, the CUDA backend and
// the GPU tests: device and pinned host buffers, streams, events, graphs. Destructors never throw
// (errors there are ignored: they run during unwinding, possibly after a fault), and after a
// communicator abort (device_lost(), check.cuh) they leave everything to the process's end: a
// cudaFree could wait forever on a kernel that uses the aborted communicator. Part of the
// internal library gpurun_cuda_support (never installed). OwnedStream owns a cudaStream_t; the
// kernels' Stream (gpurun/kernels/types.h) is a handle that owns nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "gpurun/cuda_support/check.cuh"

namespace gpurun::cuda_support {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Zeroed on `owner`, the stream that will use it first, so the zeroing is ordered before that
  // use without waiting for the host or touching the legacy stream.
  DeviceBuffer(std::size_t n, cudaStream_t owner) : n_(n) {
    if (n) {
      GPURUN_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
      GPURUN_CUDA_CHECK(cudaMemsetAsync(p_, 0, n * sizeof(T), owner));
    }
  }
  ~DeviceBuffer() {
    if (p_ && !device_lost()) cudaFree(p_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// Page-locked host memory: the only kind an async copy does not turn synchronous.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t n) : n_(n) {
    if (n) GPURUN_CUDA_CHECK(cudaMallocHost(&p_, n * sizeof(T)));
  }
  ~PinnedBuffer() {
    if (p_ && !device_lost()) cudaFreeHost(p_);
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  T* get() const { return p_; }
  T& operator[](std::size_t i) const { return p_[i]; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

class OwnedStream {
 public:
  OwnedStream() { GPURUN_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    if (s_ && !device_lost()) cudaStreamDestroy(s_);
  }
  OwnedStream(OwnedStream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  OwnedStream& operator=(OwnedStream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

enum class EventTiming { kOff, kOn };

class Event {
 public:
  explicit Event(EventTiming t = EventTiming::kOff) {
    GPURUN_CUDA_CHECK(cudaEventCreateWithFlags(
        &e_, t == EventTiming::kOn ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (e_ && !device_lost()) cudaEventDestroy(e_);
  }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// An instantiated graph (the captured template is destroyed once instantiated).
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraph_t g) {
    const cudaError_t e = cudaGraphInstantiate(&x_, g, 0);
    cudaGraphDestroy(g);
    GPURUN_CUDA_CHECK(e);
  }
  ~GraphExec() {
    if (x_ && !device_lost()) cudaGraphExecDestroy(x_);
  }
  GraphExec(GraphExec&& o) noexcept : x_(std::exchange(o.x_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    std::swap(x_, o.x_);
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  explicit operator bool() const { return x_ != nullptr; }
  void launch(cudaStream_t s) const { GPURUN_CUDA_CHECK(cudaGraphLaunch(x_, s)); }

 private:
  cudaGraphExec_t x_ = nullptr;
};

}  // namespace gpurun::cuda_support

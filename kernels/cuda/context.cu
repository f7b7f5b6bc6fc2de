// context.cu: the per-thread handle cache and the math precision switch (types.h). Host code
// only.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpurun/cuda_support/check.cuh"
#include "context.cuh"
#include "gpurun/kernels/types.h"

namespace gpurun::kernels::cuda {

namespace {
std::atomic<int> g_precision{int(MathPrecision::kFp32)};
}  // namespace

void set_math_precision(MathPrecision p) {
  g_precision.store(int(p));
}
MathPrecision math_precision() {
  return MathPrecision(g_precision.load());
}

namespace detail {

namespace {

// 32 MiB: what NVIDIA recommends as cuBLAS workspace on Hopper; ample for our GEMM shapes.
constexpr std::size_t kCublasWorkspaceBytes = std::size_t(32) << 20;

// One device's handles for one thread. Move-only; the destructor never throws and ignores errors
// (at thread exit the context may already be going away).
class Handles {
 public:
  Handles() {
    GPURUN_CUDNN_CHECK(cudnnCreate(&cudnn_));
    try {
      GPURUN_CUBLAS_CHECK(cublasCreate(&cublas_));
      GPURUN_CUDA_CHECK(cudaMalloc(&ws_, kCublasWorkspaceBytes));
    } catch (...) {
      release();
      throw;
    }
  }
  ~Handles() { release(); }
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;

  cudnnHandle_t cudnn(cudaStream_t s) {
    if (!cudnn_bound_ || cudnn_stream_ != s) {
      GPURUN_CUDNN_CHECK(cudnnSetStream(cudnn_, s));
      cudnn_stream_ = s;
      cudnn_bound_ = true;
    }
    return cudnn_;
  }
  cublasHandle_t cublas(cudaStream_t s) {
    if (!cublas_bound_ || cublas_stream_ != s) {
      GPURUN_CUBLAS_CHECK(cublasSetStream(cublas_, s));
      // cublasSetStream resets the workspace to the default pool: set ours again, always.
      GPURUN_CUBLAS_CHECK(cublasSetWorkspace(cublas_, ws_, kCublasWorkspaceBytes));
      cublas_stream_ = s;
      cublas_bound_ = true;
    }
    const MathPrecision p = math_precision();
    if (!math_set_ || p != math_) {
      GPURUN_CUBLAS_CHECK(cublasSetMathMode(
          cublas_, p == MathPrecision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
      math_ = p;
      math_set_ = true;
    }
    return cublas_;
  }

 private:
  void release() noexcept {
    if (cuda_support::device_lost()) return;  // left to the process's end (check.cuh)
    if (cublas_) cublasDestroy(cublas_);
    if (cudnn_) cudnnDestroy(cudnn_);
    if (ws_) cudaFree(ws_);
    cublas_ = nullptr;
    cudnn_ = nullptr;
    ws_ = nullptr;
  }
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* ws_ = nullptr;
  cudaStream_t cudnn_stream_ = nullptr, cublas_stream_ = nullptr;
  bool cudnn_bound_ = false, cublas_bound_ = false, math_set_ = false;
  MathPrecision math_ = MathPrecision::kFp32;
};

Handles& handles() {
  thread_local std::map<int, std::unique_ptr<Handles>> per_device;
  int dev = 0;
  GPURUN_CUDA_CHECK(cudaGetDevice(&dev));
  auto& h = per_device[dev];
  if (!h) h = std::make_unique<Handles>();
  return *h;
}

}  // namespace

cudnnHandle_t cudnn_on(Stream s) {
  return handles().cudnn(raw(s));
}
cublasHandle_t cublas_on(Stream s) {
  return handles().cublas(raw(s));
}
void warm_up() {
  (void)handles();
}

int grid_blocks(std::size_t n, int block) {
  // 132 SMs x 16 resident blocks covers an H100; more blocks than that only add tail waves in a
  // grid-stride loop.
  constexpr std::size_t kMaxBlocks = 132 * 16;
  const std::size_t b = (n + std::size_t(block) - 1) / std::size_t(block);
  return int(std::max<std::size_t>(1, std::min(b, kMaxBlocks)));
}

}  // namespace detail
}  // namespace gpurun::kernels::cuda

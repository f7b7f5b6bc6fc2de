// device.h (gpurun CUDA stand-in): what a .cu file compiled as C++ needs to run its kernels on
// the CPU. Every CUDA thread of a block runs on a fiber of its own (src/grid.cc), so
// __syncthreads and the warp operations really wait for the threads they name; threadIdx and the
// other built-in variables read the running fiber's coordinates. A kernel is launched through
// gpurun_standin::launch (gpurun/cuda_support/launch.cuh: GPURUN_KERNEL_LAUNCH expands to it in
// the stand-in build and to <<<>>> under nvcc), which binds the arguments by value as a launch
// does.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// Qualifiers: plain C++. __shared__ is static per executor thread, and an executor thread runs
// the blocks of a kernel one at a time, so a block never sees another's shared memory while it
// runs. It is zeroed once, not per block: a block reading shared memory it did not write sees
// what an earlier block left there (README's limits).
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __constant__

namespace gpurun_standin {

// Where the running CUDA thread is (set by the block scheduler before each fiber switch): its
// threadIdx, and its block's coordinates and the launch's shape.
struct BlockCoords {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
extern thread_local const uint3* t_thread;
extern thread_local const BlockCoords* t_block_coords;

void syncthreads(const char* file, int line);
void syncwarp(const char* file, int line, unsigned mask = 0xffffffffu);

enum class WarpOp { kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAll, kAny };
// Every lane named in `mask` must reach the same warp operation; each contributes `value` and
// gets the result of `op` (for shuffles: the chosen lane's value; for votes: the vote).
std::uint64_t warp_op(WarpOp op, const char* file, int line, unsigned mask, std::uint64_t value,
                      int arg, int width);

template <typename T>
T shfl(WarpOp op, const char* file, int line, unsigned mask, T v, int arg, int width = 32) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                "shuffles move values of at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  const std::uint64_t r = warp_op(op, file, line, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}

// A launch as the runtime sees it: the body runs once per CUDA thread; `pointers` are the
// arguments of pointer type (checked against the allocations when the kernel runs).
struct KernelLaunch {
  const char* name;
  dim3 grid, block;
  std::size_t shared_bytes;
  std::function<void()> body;
  std::vector<const void*> pointers;
};
cudaError_t enqueue_kernel(KernelLaunch launch, cudaStream_t stream);

template <typename T>
void collect_pointer(std::vector<const void*>& out, const T& v) {
  if constexpr (std::is_pointer<T>::value) out.push_back(static_cast<const void*>(v));
}

template <typename... P, typename... A>
cudaError_t launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block,
                   std::size_t shared_bytes, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "wrong number of kernel arguments");
  // Converted to the parameter types now, as a launch copies its arguments.
  std::tuple<std::decay_t<P>...> bound(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
  KernelLaunch l{name, grid, block, shared_bytes, {}, {}};
  std::apply([&l](const auto&... v) { (collect_pointer(l.pointers, v), ...); }, bound);
  l.body = [kernel, bound]() { std::apply(kernel, bound); };
  return enqueue_kernel(std::move(l), stream);
}

}  // namespace gpurun_standin

#define threadIdx (*::gpurun_standin::t_thread)
#define blockIdx (::gpurun_standin::t_block_coords->block_idx)
#define blockDim (::gpurun_standin::t_block_coords->block_dim)
#define gridDim (::gpurun_standin::t_block_coords->grid_dim)
constexpr int warpSize = 32;  // a variable in CUDA too (cudaDeviceProp has a field of that name)

#define __syncthreads() ::gpurun_standin::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::gpurun_standin::syncwarp(__FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_sync(mask, v, ...) \
  ::gpurun_standin::shfl(::gpurun_standin::WarpOp::kShflIdx, __FILE__, __LINE__, mask, v, __VA_ARGS__)
#define __shfl_up_sync(mask, v, ...) \
  ::gpurun_standin::shfl(::gpurun_standin::WarpOp::kShflUp, __FILE__, __LINE__, mask, v, __VA_ARGS__)
#define __shfl_down_sync(mask, v, ...) \
  ::gpurun_standin::shfl(::gpurun_standin::WarpOp::kShflDown, __FILE__, __LINE__, mask, v, __VA_ARGS__)
#define __shfl_xor_sync(mask, v, ...) \
  ::gpurun_standin::shfl(::gpurun_standin::WarpOp::kShflXor, __FILE__, __LINE__, mask, v, __VA_ARGS__)
#define __ballot_sync(mask, pred)                                                               \
  unsigned(::gpurun_standin::warp_op(::gpurun_standin::WarpOp::kBallot, __FILE__, __LINE__, mask, \
                                     (pred) ? 1 : 0, 0, 32))
#define __all_sync(mask, pred)                                                                \
  int(::gpurun_standin::warp_op(::gpurun_standin::WarpOp::kAll, __FILE__, __LINE__, mask,      \
                                (pred) ? 1 : 0, 0, 32))
#define __any_sync(mask, pred)                                                                \
  int(::gpurun_standin::warp_op(::gpurun_standin::WarpOp::kAny, __FILE__, __LINE__, mask,      \
                                (pred) ? 1 : 0, 0, 32))

// Device math that CUDA offers in the global namespace.
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }

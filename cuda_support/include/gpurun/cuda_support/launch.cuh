// launch.cuh: the one way the project launches a kernel, in both builds. nvcc's <<<>>> is not
// C++, so in the CPU stand-in build (tests/standin, where the .cu files are compiled as C++) the
// same macro becomes the stand-in's typed launch, which binds the arguments as a launch does.
// Use check.cuh's GPURUN_LAUNCH, which adds the launch check every launch needs; this bare form
// is for code that must not throw (device_probe.cu).
#pragma once

#include <cuda_runtime.h>

// Every kernel declares the block size it is launched with: GPURUN_KERNEL_BOUNDS(threads) before
// its name (kernels_launch_bounds checks that each has it). ptxas then fits its registers to that
// block (a 1,024-thread kernel without a bound may take more registers than a block can have and
// fail to launch). The minimum of one block per SM keeps ptxas from trading registers for
// occupancy: with the bound alone it capped max_pool_bwd_kernel at 32 registers on sm_80 and
// spilled (the build fails on spills and local memory).
#define GPURUN_KERNEL_BOUNDS(threads) __launch_bounds__(threads, 1)

// Before a loop over a compile-time count whose body indexes a small array: fully unrolled, the
// array stays in registers (ptxas fails the build on local memory). The stand-in's C++ has no
// such pragma.
#if defined(GPURUN_CUDA_STANDIN)
#define GPURUN_UNROLL
#else
#define GPURUN_UNROLL _Pragma("unroll")
#endif

#if defined(GPURUN_CUDA_STANDIN)
#define GPURUN_KERNEL_LAUNCH(kernel, grid, block, smem, stream, ...)                     \
  (void)::gpurun_standin::launch(#kernel, kernel, dim3(grid), dim3(block), smem, stream, \
                                 __VA_ARGS__)
#else
#define GPURUN_KERNEL_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif

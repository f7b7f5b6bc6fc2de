// cpu_kernels.h: which library does the CPU ops' heavy lifting (the matrix products of dense.h
// and conv2d.h), chosen once per process before training (mnist_cnn --cpu-kernels):
//   onednn:   oneDNN primitives (convolutions with bias and ReLU fused, matmuls), created once
//             per shape and reused; oneDNN picks the CPU's best instructions itself (AVX-512 on
//             this project's build machine, whatever OPENBLAS_CORETYPE says); a first layer's
//             single-channel convolution runs direct vectorised loops instead (cpu/conv2d_direct.h:
//             oneDNN's would need layout reorders that cost more than it). The default when the
//             build found oneDNN.
//   openblas: im2col + OpenBLAS sgemm (the default otherwise).
//   blis:     BLIS sgemm, loaded at run time when the machine has it.
// The ref:: ops never change: they are the oracle every choice is tested against.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpurun::kernels::cpu {

enum class CpuKernels { kOneDnn, kOpenBlas, kBlis };

const char* name(CpuKernels k);  // "onednn", "openblas", "blis"
std::optional<CpuKernels> parse_cpu_kernels(std::string_view text);
// Whether this build and machine can use k; otherwise why not.
bool cpu_kernels_available(CpuKernels k, std::string* why_not = nullptr);
CpuKernels default_cpu_kernels();  // oneDNN when built with it, else OpenBLAS
// Process-wide; throws std::invalid_argument saying why when k is not available.
void set_cpu_kernels(CpuKernels k);
CpuKernels cpu_kernels();
// What the chosen library runs on this CPU, for reports ("oneDNN 2.6.3 avx512_core", ...).
std::string cpu_kernels_info();

}  // namespace gpurun::kernels::cpu

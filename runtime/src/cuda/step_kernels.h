// step_kernels.h: the GPU trainer's own small kernels (launchers; host-callable, no CUDA types in
// the signatures beyond the opaque stream). Private to runtime/src/cuda.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpurun/kernels/types.h"

namespace gpurun::runtime::cuda {

// x[k] = pixels[idx[k]] / 255 (as Split::gather does), y[k] = labels[idx[k]], for k < n.
// With `step` (device int): idx += *step * n, and *lr_out = lr_table[*step], so one captured
// graph walks the epoch as the step counter advances. Without it (nullptr) idx is used as given.
void gather_batch(const std::uint8_t* pixels, const std::int32_t* labels, std::size_t image_floats,
                  const std::int32_t* idx, const int* step, int n, const float* lr_table,
                  float* lr_out, float* x, std::int32_t* y, kernels::Stream s);

// End of a training step: loss_hist[*step] = *loss, correct_hist[*step] = *correct, ++*step.
void advance_step(int* step, const float* loss, const std::int64_t* correct, float* loss_hist,
                  std::int64_t* correct_hist, kernels::Stream s);

}  // namespace gpurun::runtime::cuda

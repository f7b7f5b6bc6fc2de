// synthetic_data.h: a small learnable dataset made in memory for the GPU backend tests (no files
// needed): class c is a bright 6x6 square at a class-dependent place over dim noise, so losses
// move within a few dozen steps and any divergence between two paths shows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpurun/runtime/dataset.h"

namespace gpurun::runtime::testing {

Split synthetic_split(std::size_t count, std::uint64_t seed);
// 6,400 training images (100 steps of 64) and 512 test images.
Dataset synthetic_dataset();

}  // namespace gpurun::runtime::testing

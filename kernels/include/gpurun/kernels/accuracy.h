// accuracy.h: how many rows of logits [batch, classes] have their arg-max at the label
// (ties go to the lowest class index, as torch.argmax does).
#pragma once

#include "gpurun/kernels/config.h"
#include "gpurun/kernels/types.h"

namespace gpurun::kernels {

struct AccuracyDesc {
  int batch = 0;
  int classes = 0;
};

void validate(const AccuracyDesc& d);

namespace ref {
// correct[0] = number of matching rows (overwritten).
void accuracy_count(const AccuracyDesc& d, const float* logits, const std::int32_t* labels,
                    std::int64_t* correct);
}  // namespace ref

namespace cpu {
void accuracy_count(const AccuracyDesc& d, const float* logits, const std::int32_t* labels,
                    std::int64_t* correct);
}  // namespace cpu

#if GPURUN_KERNELS_HAVE_CUDA
namespace cuda {
// correct is a device pointer (one int64).
void accuracy_count(const AccuracyDesc& d, const float* logits, const std::int32_t* labels,
                    std::int64_t* correct, Stream s);
}  // namespace cuda
#endif

}  // namespace gpurun::kernels

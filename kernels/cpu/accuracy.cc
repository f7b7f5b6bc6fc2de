// accuracy.cc: arg-max correct count; the first maximum wins, as torch.argmax does.
#include "gpurun/kernels/accuracy.h"

namespace gpurun::kernels {
namespace {
std::int64_t count(const AccuracyDesc& d, const float* logits, const std::int32_t* labels) {
  validate(d);
  std::int64_t correct = 0;
  for (int n = 0; n < d.batch; ++n) {
    const float* z = logits + std::size_t(n) * d.classes;
    int best = 0;
    for (int c = 1; c < d.classes; ++c)
      if (z[c] > z[best]) best = c;
    correct += best == labels[n];
  }
  return correct;
}
}  // namespace

namespace ref {
void accuracy_count(const AccuracyDesc& d, const float* logits, const std::int32_t* labels,
                    std::int64_t* correct) {
  *correct = count(d, logits, labels);
}
}  // namespace ref

namespace cpu {
void accuracy_count(const AccuracyDesc& d, const float* logits, const std::int32_t* labels,
                    std::int64_t* correct) {
  *correct = count(d, logits, labels);
}
}  // namespace cpu

}  // namespace gpurun::kernels

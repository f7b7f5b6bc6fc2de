// softmax_xent.cc: fused softmax + cross-entropy. Subtracting the row max before exp keeps it
// finite for any logits; the loss uses log-sum-exp, never log(softmax), so it cannot be log(0).
#include "gpurun/kernels/softmax_xent.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace gpurun::kernels {
namespace {

void check_label(const SoftmaxXentDesc& d, int n, std::int32_t label) {
  if (label < 0 || label >= d.classes) {
    throw std::out_of_range("softmax_xent: label " + std::to_string(label) + " at position " +
                            std::to_string(n) + " is outside [0, " + std::to_string(d.classes) +
                            ")");
  }
}

// Shared by ref:: and cpu::: the fused one-pass form is already the fast form on a CPU; the
// reference differs only in computing in double.
template <typename Acc>
void run(const SoftmaxXentDesc& d, const float* logits, const std::int32_t* labels, float* dlogits,
         float* loss_sum) {
  validate(d);
  double total = 0;
  for (int n = 0; n < d.batch; ++n) {
    const float* z = logits + std::size_t(n) * d.classes;
    float* g = dlogits + std::size_t(n) * d.classes;
    const std::int32_t label = labels[n];
    check_label(d, n, label);
    Acc m = z[0];
    for (int c = 1; c < d.classes; ++c) m = z[c] > m ? Acc(z[c]) : m;
    Acc sum = 0;
    const Acc zl = z[label];
    for (int c = 0; c < d.classes; ++c) {
      const Acc e = std::exp(Acc(z[c]) - m);
      g[c] = float(e);  // may alias z: z[c] is not read again after this point
      sum += e;
    }
    total += double(std::log(sum) - (zl - m));
    const Acc scale = Acc(d.grad_scale) / sum;
    for (int c = 0; c < d.classes; ++c) g[c] = float(Acc(g[c]) * scale);
    g[label] -= d.grad_scale;
  }
  *loss_sum = float(total);
}

}  // namespace

namespace ref {
void softmax_xent(const SoftmaxXentDesc& d, const float* logits, const std::int32_t* labels,
                  float* dlogits, float* loss_sum) {
  run<double>(d, logits, labels, dlogits, loss_sum);
}
}  // namespace ref

namespace cpu {
void softmax_xent(const SoftmaxXentDesc& d, const float* logits, const std::int32_t* labels,
                  float* dlogits, float* loss_sum) {
  run<float>(d, logits, labels, dlogits, loss_sum);
}
}  // namespace cpu

}  // namespace gpurun::kernels

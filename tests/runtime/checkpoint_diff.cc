// checkpoint_diff: compares the parameters of two checkpoints, and optionally their mean
// training loss so far (the loss sums they carry, in double precision).
//   checkpoint_diff A/checkpoint.bin B/checkpoint.bin [TOLERANCE [LOSS_TOLERANCE]]
// Prints the largest absolute difference and both mean losses; exits 0 when the parameters
// differ by <= TOLERANCE (default 0: bitwise equal parameters and velocity) and, when
// LOSS_TOLERANCE is given, the mean losses by <= LOSS_TOLERANCE; 1 when not, 2 on errors.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "train/checkpoint.h"

namespace {

double mean_loss(const gpurun::runtime::Checkpoint& c) {
  return c.epoch_seen > 0 ? c.epoch_loss_sum / c.epoch_seen : std::nan("");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: checkpoint_diff A B [TOLERANCE [LOSS_TOLERANCE]]\n");
    return 2;
  }
  try {
    const auto a = gpurun::runtime::load_checkpoint(argv[1]);
    const auto b = gpurun::runtime::load_checkpoint(argv[2]);
    const double tol = argc > 3 ? std::atof(argv[3]) : 0.0;
    if (a.params.size() != b.params.size() || a.velocity.size() != b.velocity.size()) {
      std::printf("different sizes: %zu vs %zu parameters\n", a.params.size(), b.params.size());
      return 1;
    }
    double max_diff = 0;
    std::size_t at = 0, differ = 0;
    for (std::size_t i = 0; i < a.params.size(); ++i) {
      const double d = std::fabs(double(a.params[i]) - b.params[i]);
      differ += a.params[i] != b.params[i];
      if (d > max_diff || std::isnan(d)) max_diff = d, at = i;
    }
    for (std::size_t i = 0; i < a.velocity.size(); ++i) {
      max_diff = std::fmax(max_diff, std::fabs(double(a.velocity[i]) - b.velocity[i]));
    }
    const double la = mean_loss(a), lb = mean_loss(b);
    std::printf(
        "max |a-b| = %.3g at parameter %zu; %zu of %zu parameters differ; steps %lld vs %lld; "
        "mean training loss %.6f vs %.6f (|d| %.2g)\n",
        max_diff, at, differ, a.params.size(), (long long)a.global_step, (long long)b.global_step,
        la, lb, std::fabs(la - lb));
    if (a.global_step != b.global_step) return 1;
    if (argc > 4 && !(std::fabs(la - lb) <= std::atof(argv[4]))) return 1;
    return max_diff <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_diff: %s\n", e.what());
    return 2;
  }
}

// checkpoint_diff: compares the parameters of two checkpoints.
//   checkpoint_diff A/checkpoint.bin B/checkpoint.bin [TOLERANCE]
// Prints the largest absolute difference; exits 0 when it is <= TOLERANCE (default 0: bitwise
// equal parameters and velocity), 1 when it is larger, 2 on errors.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "gpurun/runtime/checkpoint.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: checkpoint_diff A B [TOLERANCE]\n");
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
    std::printf(
        "max |a-b| = %.3g at parameter %zu; %zu of %zu parameters differ; steps %lld vs %lld\n",
        max_diff, at, differ, a.params.size(), (long long)a.global_step, (long long)b.global_step);
    if (a.global_step != b.global_step) return 1;
    return max_diff <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_diff: %s\n", e.what());
    return 2;
  }
}

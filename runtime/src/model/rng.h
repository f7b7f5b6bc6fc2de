// rng.h: the runtime's only random numbers: SplitMix64 plus unbiased bounded integers and uniform
// floats computed from raw bits. std:: distributions are implementation-defined, so they would
// make shuffles and initial weights differ between standard libraries; these do not.
#pragma once

#include <cstdint>

namespace gpurun::runtime {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  // A stream for (seed, a, b), e.g. (seed, epoch) for the sampler: independent of other streams.
  static Rng derive(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0);

  std::uint64_t next();
  // Uniform in [0, n), without modulo bias (Lemire's multiply-and-reject).
  std::uint64_t below(std::uint64_t n);
  // Uniform float in [lo, hi) from the top 24 bits.
  float uniform(float lo, float hi);
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

}  // namespace gpurun::runtime

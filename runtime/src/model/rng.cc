// rng.cc: SplitMix64 (Steele, Lea, Flood 2014) and Lemire's bounded integers.
#include "model/rng.h"

namespace gpurun::runtime {

std::uint64_t Rng::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Rng Rng::derive(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  Rng r(seed);
  const std::uint64_t s1 = r.next() ^ (a * 0xD1B54A32D192ED03ull);
  Rng r2(s1);
  return Rng(r2.next() ^ (b * 0x8CB92BA72F3D8DD7ull));
}

std::uint64_t Rng::below(std::uint64_t n) {
  // 128-bit product: the high word is uniform in [0, n) once low-word rejects are removed.
  unsigned __int128 m = (unsigned __int128)next() * n;
  std::uint64_t low = std::uint64_t(m);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = (unsigned __int128)next() * n;
      low = std::uint64_t(m);
    }
  }
  return std::uint64_t(m >> 64);
}

float Rng::uniform(float lo, float hi) {
  const float u = float(next() >> 40) * (1.0f / 16777216.0f);  // [0, 1) in steps of 2^-24
  return lo + (hi - lo) * u;
}

}  // namespace gpurun::runtime

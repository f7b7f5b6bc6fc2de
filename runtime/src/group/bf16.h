// bf16.h (private): bfloat16, the upper half of a float, for sums that send half the bytes
// (ProcessGroup::allreduce_sum_bf16; local SGD's averages, cpu/model_average.cc). Rounded to
// nearest even; a NaN stays a NaN. Plain integer code that the compiler vectorises on any x86-64.
#pragma once

#include <cstdint>
#include <cstring>

namespace gpurun::runtime {

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(nan ? (u >> 16) | 0x40u : rounded >> 16);
}

inline float from_bf16(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace gpurun::runtime

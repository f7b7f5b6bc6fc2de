// tf32.h (gpurun CUDA stand-in, private): TF32 as tensor cores read FP32 inputs: 10 mantissa
// bits, rounded to nearest (ties away), so a TF32 product in the stand-in differs from FP32 as
// much as on the device and tests that compare FP32 and TF32 runs stay honest.
#pragma once

#include <cstdint>
#include <cstring>

namespace gpurun_standin {

inline float to_tf32(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;  // finite values only
  std::memcpy(&v, &u, 4);
  return v;
}

}  // namespace gpurun_standin

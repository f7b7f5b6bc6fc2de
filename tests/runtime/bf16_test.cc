// bf16_test.cc: bfloat16 rounding (runtime/src/group/bf16.h), what local SGD's averages and
// ProcessGroup::allreduce_sum_bf16 send: round to nearest, ties to even, NaN kept, and the
// round trip of every bfloat16 exact. The MPI sum itself: allreduce_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "group/bf16.h"

namespace gpurun::runtime {
namespace {

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(-2.0f), 0xc000);
  const float ulp = std::ldexp(1.0f, -7);  // bfloat16's step just above 1
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0.49f * ulp)), 1.0f);
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0.51f * ulp)), 1.0f + ulp);
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0.5f * ulp)), 1.0f);               // tie: to even (1.0)
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 1.5f * ulp)), 1.0f + 2.0f * ulp);  // tie: to even (1 + 2u)
  EXPECT_EQ(from_bf16(to_bf16(std::numeric_limits<float>::max())),  // past bfloat16's largest
            std::numeric_limits<float>::infinity());
  EXPECT_GT(std::fabs(from_bf16(to_bf16(1e-40f))), 0.0f);  // subnormals are kept
}

TEST(Bf16, KeepsNaN) {
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload is in the low half only would round to infinity without care.
  const std::uint32_t bits = 0x7f800001;
  float low_nan;
  std::memcpy(&low_nan, &bits, sizeof low_nan);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(low_nan))));
}

TEST(Bf16, EveryValueRoundTrips) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = from_bf16(std::uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(to_bf16(f), h) << std::hex << h;
  }
}

}  // namespace
}  // namespace gpurun::runtime

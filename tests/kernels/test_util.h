// test_util.h: helpers shared by the kernel tests: seeded random tensors and the comparison the
// style guide asks for (|a - ref| <= atol + rtol*|ref|, printing the first mismatches).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace gpurun::kernels::testing {

inline std::vector<float> random_vec(std::size_t n, std::uint64_t seed, float lo = -1.0f,
                                     float hi = 1.0f) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * float(s >> 40) / 16777216.0f;
  }
  return v;
}

inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& ref, float atol, float rtol) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  }
  std::ostringstream msg;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float tol = atol + rtol * std::fabs(ref[i]);
    if (!(std::fabs(got[i] - ref[i]) <= tol)) {
      if (bad < 5) msg << "\n  [" << i << "] got " << got[i] << " want " << ref[i];
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values differ" << msg.str();
}

}  // namespace gpurun::kernels::testing

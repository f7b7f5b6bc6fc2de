// synthetic_data.cc: see synthetic_data.h.
#include "synthetic_data.h"

namespace gpurun::runtime::testing {

Split synthetic_split(std::size_t count, std::uint64_t seed) {
  Split s;
  s.count = count;
  s.rows = s.cols = 28;
  s.pixels.resize(count * 784);
  s.labels.resize(count);
  std::uint64_t r = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&r] {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    return std::uint32_t(r >> 33);
  };
  for (std::size_t i = 0; i < count; ++i) {
    const int c = int(next() % 10);
    s.labels[i] = c;
    std::uint8_t* img = &s.pixels[i * 784];
    for (int p = 0; p < 784; ++p) img[p] = std::uint8_t(next() % 60);
    const int r0 = (c / 5) * 12 + 4 + int(next() % 3), c0 = (c % 5) * 5 + 1;
    for (int y = r0; y < r0 + 6; ++y)
      for (int x = c0; x < c0 + 6; ++x) img[y * 28 + x] = std::uint8_t(200 + next() % 56);
  }
  return s;
}

Dataset synthetic_dataset() {
  Dataset d;
  d.name = "synthetic";
  d.train = synthetic_split(6400, 1);
  d.test = synthetic_split(512, 2);
  return d;
}

}  // namespace gpurun::runtime::testing

// strings.cc: split, fnv1a, seconds_since (strings.h).
#include "gpurun/common/strings.h"

namespace gpurun::common {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t b = 0;
  while (true) {
    const std::size_t e = s.find(sep, b);
    out.emplace_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return out;
    b = e + 1;
  }
}

std::uint64_t fnv1a(const void* data, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(data);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace gpurun::common

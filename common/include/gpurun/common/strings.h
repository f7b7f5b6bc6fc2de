// strings.h: the small text and number helpers every part needs, each once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpurun::common {

// "a,b,,c" split at ',' -> {"a", "b", "", "c"}; "" -> {""}: every field, empty ones kept.
std::vector<std::string> split(std::string_view s, char sep);

// 64-bit FNV-1a of n bytes (checkpoint checksums, the parameters' checksum in reports): the same
// value on every machine for the same bytes. Its offset basis is 1469598103934665603, a digit
// short of the published 14695981039346656037: the first checkpoints used it, and every
// checkpoint written since must still load. Catching truncation and corruption, the checksum's
// job, does not depend on the constant.
std::uint64_t fnv1a(const void* data, std::size_t n);
inline std::uint64_t fnv1a(std::string_view s) {
  return fnv1a(s.data(), s.size());
}

// Percent-encoding, the one escaping of the project's line formats (the control protocol, GPU
// sample lines): '%' and every byte for which `escape` is true become %XX (upper-case hex), so
// any bytes (not only UTF-8) survive a line. percent_decode reverses it; nullopt for a '%' not
// followed by two hex digits.
std::string percent_encode(std::string_view s, bool (*escape)(unsigned char byte));
std::optional<std::string> percent_decode(std::string_view s);

// Seconds from `t` to now on the steady clock.
double seconds_since(std::chrono::steady_clock::time_point t);

}  // namespace gpurun::common

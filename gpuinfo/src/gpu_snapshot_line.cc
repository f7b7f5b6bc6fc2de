// gpu_snapshot_line.cc: a GpuSnapshot as one line of text and back (gpu_sampler.h). The line is
//   gpus/1 t=<ms> host=<s> src=<s>
//   g=<index>,<mig>,<util>,<used>,<total>,<power>,<temp>,<uuid>,<name>
//          ... p=<problem> ...
// one token per field, tokens joined by single spaces, "-" for a figure the GPU did not give, and
// strings percent-encoded (every byte outside '!'..'~', and '%', ',', '=') so no field can break
// the line. Unknown keys are skipped, so a newer writer can add fields without breaking a reader.
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "gpurun/common/error.h"
#include "gpurun/common/strings.h"
#include "gpurun/gpuinfo/gpu_sampler.h"

namespace gpurun::gpuinfo {

using common::Error;
namespace {

constexpr std::string_view kTag = "gpus/1";

bool escaped(unsigned char c) {
  return c < '!' || c > '~' || c == ',' || c == '=';
}

std::string enc(std::string_view s) {
  return common::percent_encode(s, escaped);
}

std::string dec(std::string_view s, std::string_view what) {
  auto out = common::percent_decode(s);
  if (!out) throw Error(fmt::format("GPU sample line: {} has a bad escape in '{}'", what, s));
  return *out;
}

std::string num(const std::optional<double>& v) {
  return v ? fmt::format("{}", *v) : "-";
}

std::optional<double> parse_num(std::string_view s, std::string_view what) {
  if (s == "-") return std::nullopt;
  std::string text(s);
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || d != d)
    throw Error(fmt::format("GPU sample line: {} is '{}', expected a number or -", what, s));
  return d;
}

int64_t parse_int(std::string_view s, std::string_view what) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size())
    throw Error(fmt::format("GPU sample line: {} is '{}', expected an integer", what, s));
  return v;
}

GpuSample parse_gpu(std::string_view v) {
  std::vector<std::string_view> f;
  for (size_t at; (at = v.find(',')) != std::string_view::npos; v.remove_prefix(at + 1))
    f.push_back(v.substr(0, at));
  f.push_back(v);
  if (f.size() != 9)
    throw Error(fmt::format("GPU sample line: g= has {} fields, expected 9", f.size()));
  GpuSample g;
  g.index = static_cast<int>(parse_int(f[0], "GPU index"));
  g.mig = static_cast<int>(parse_int(f[1], "MIG number"));
  g.util_percent = parse_num(f[2], "utilisation");
  g.mem_used_mib = parse_num(f[3], "memory used");
  g.mem_total_mib = parse_num(f[4], "memory total");
  g.power_w = parse_num(f[5], "power");
  g.temp_c = parse_num(f[6], "temperature");
  g.uuid = dec(f[7], "uuid");
  g.name = dec(f[8], "name");
  return g;
}

}  // namespace

std::string encode_snapshot(const GpuSnapshot& s) {
  std::string out =
      fmt::format("{} t={} host={} src={}", kTag, s.time_ms, enc(s.host), enc(s.source));
  for (const auto& g : s.gpus)
    out += fmt::format(" g={},{},{},{},{},{},{},{},{}", g.index, g.mig, num(g.util_percent),
                       num(g.mem_used_mib), num(g.mem_total_mib), num(g.power_w), num(g.temp_c),
                       enc(g.uuid), enc(g.name));
  for (const auto& p : s.problems) out += " p=" + enc(p);
  return out;
}

GpuSnapshot decode_snapshot(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.substr(0, kTag.size()) != kTag ||
      (line.size() > kTag.size() && line[kTag.size()] != ' '))
    throw Error(
        fmt::format("GPU sample line does not start with '{}': '{}'", kTag, line.substr(0, 40)));
  line.remove_prefix(kTag.size());
  GpuSnapshot s;
  bool have_time = false;
  while (!line.empty()) {
    line.remove_prefix(1);  // the space before each token
    size_t end = line.find(' ');
    std::string_view tok = line.substr(0, end);
    line.remove_prefix(end == std::string_view::npos ? line.size() : end);
    size_t eq = tok.find('=');
    if (eq == std::string_view::npos || eq == 0)
      throw Error(fmt::format("GPU sample line: '{}' is not key=value", tok.substr(0, 40)));
    std::string_view key = tok.substr(0, eq), value = tok.substr(eq + 1);
    if (key == "t") {
      s.time_ms = parse_int(value, "t");
      have_time = true;
    } else if (key == "host") {
      s.host = dec(value, "host");
    } else if (key == "src") {
      s.source = dec(value, "src");
    } else if (key == "g") {
      s.gpus.push_back(parse_gpu(value));
    } else if (key == "p") {
      s.problems.push_back(dec(value, "problem"));
    }
  }
  if (!have_time) throw Error("GPU sample line has no t= (time)");
  return s;
}

}  // namespace gpurun::gpuinfo

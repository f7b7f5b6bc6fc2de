// nvidia_smi_parse.cc: pure parsers for what nvidia-smi prints (gpu_sampler.h).
//
// What real nvidia-smi prints, and where that comes from:
//  - --query-gpu with --format=csv,noheader,nounits: one line per GPU, fields joined by ", ", in
//    the order asked; a figure the device does not report is "[N/A]" (or "[Not Supported]" from
//    older drivers); nvidia-smi(1), "QUERY GPU OPTIONS" (driver 550 man page). Other bracketed
//    words ("[Unknown Error]", "[GPU requires reset]", "[Insufficient Permissions]") appear in
//    the same places and mean the same to us: no figure.
//  - mig.mode.current is "Enabled", "Disabled", or "[N/A]" on boards without MIG; in MIG mode
//    utilization.gpu reads [N/A] (NVIDIA MIG User Guide: GPU utilisation is not supported with
//    MIG enabled), so MIG devices are taken from `nvidia-smi -L`.
//  - a GPU that fell off the bus is not a row but a line like "Unable to determine the device
//    handle for GPU1: 0000:34:00.0: Unknown Error" (seen in public transcripts of driver 550 to
//    610 failures), and "No devices were found" when none is left.
//  - --query-compute-apps with the same format: one line per process with a compute context, the
//    fields in the order asked (nvidia-smi(1), "QUERY COMPUTE APPS": gpu_uuid, pid, used_memory);
//    nothing, or "No running processes found", when there is none; used_memory reads [N/A] where
//    the driver cannot attribute memory (MIG, WDDM).
#include <charconv>
#include <cstdlib>
#include <string>

#include "gpurun/gpuinfo/gpu_sampler.h"
#include "nvidia_smi_text.h"

namespace gpurun::gpuinfo {
namespace {

using smi::split;
using smi::trim;

// A finite number, optionally followed by the unit nvidia-smi prints without `nounits`. Anything
// else ("[N/A]", "[Not Supported]", "N/A", garbage) is no figure.
std::optional<double> figure(std::string_view v) {
  for (std::string_view unit : {" MiB", " W", " %", " C"})
    if (v.size() > unit.size() && v.substr(v.size() - unit.size()) == unit)
      v.remove_suffix(unit.size());
  if (v.empty() || v.size() > 32) return std::nullopt;
  std::string text(v);  // strtod needs a terminator; from_chars for double is not everywhere yet
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || d != d || d > 1e15 || d < -1e15) return std::nullopt;
  if (text.find_first_not_of("0123456789.-+eE") != std::string::npos) return std::nullopt;
  return d;
}

std::optional<int> small_int(std::string_view v) {
  int n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 0 || n > 1000000) return std::nullopt;
  return n;
}

// A process id: 1 to 4194304 (2^22, the largest pid_max Linux allows).
std::optional<int> pid_number(std::string_view v) {
  int n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 1 || n > (1 << 22)) return std::nullopt;
  return n;
}

std::string cut(std::string_view line) {
  return std::string(line.substr(0, 200));
}

}  // namespace

NvidiaSmiCsv parse_nvidia_smi_csv(std::string_view text) {
  NvidiaSmiCsv out;
  smi::for_each_line(text, [&](std::string_view line) {
    if (line == "No devices were found") return;
    auto f = split(line, ',');
    std::optional<int> index = f.size() == 9 ? small_int(f[0]) : std::nullopt;
    if (!index) {
      out.problems.push_back(cut(line));
      return;
    }
    GpuSample g;
    g.index = *index;
    g.uuid = std::string(f[1]);
    g.name = std::string(f[2]);
    if (f[3] == "Enabled") out.mig_enabled.push_back(g.index);
    g.util_percent = figure(f[4]);
    g.mem_used_mib = figure(f[5]);
    g.mem_total_mib = figure(f[6]);
    g.power_w = figure(f[7]);
    g.temp_c = figure(f[8]);
    out.gpus.push_back(std::move(g));
  });
  return out;
}

std::vector<GpuProcess> parse_nvidia_smi_compute_apps(std::string_view text,
                                                      std::vector<std::string>* problems) {
  std::vector<GpuProcess> out;
  smi::for_each_line(text, [&](std::string_view line) {
    if (line == "No running processes found") return;
    auto f = split(line, ',');
    std::optional<int> pid = f.size() == 3 ? pid_number(f[1]) : std::nullopt;
    bool uuid = f.size() == 3 && (f[0].substr(0, 4) == "GPU-" || f[0].substr(0, 4) == "MIG-");
    if (!pid || !uuid) {
      problems->push_back(cut(line));
      return;
    }
    out.push_back({-1, std::string(f[0]), *pid, figure(f[2])});
  });
  return out;
}

std::vector<GpuSample> parse_nvidia_smi_mig_list(std::string_view text) {
  // "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)" then
  // "  MIG 1g.10gb     Device  0: (UUID: MIG-...)" (MIG User Guide, "Getting Started with MIG").
  std::vector<GpuSample> out;
  std::optional<int> gpu;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.substr(0, 4) == "GPU ") {
      size_t colon = line.find(':');
      gpu = colon == std::string_view::npos ? std::nullopt : small_int(line.substr(4, colon - 4));
      continue;
    }
    if (line.substr(0, 4) != "MIG " || !gpu) continue;
    size_t dev = line.find("Device");
    size_t colon = line.find(':', dev == std::string_view::npos ? 0 : dev);
    size_t uuid = line.find("UUID: ");
    size_t close = line.rfind(')');
    if (dev == std::string_view::npos || colon == std::string_view::npos ||
        uuid == std::string_view::npos || close == std::string_view::npos || close < uuid)
      continue;
    auto number = small_int(trim(line.substr(dev + 6, colon - dev - 6)));
    if (!number) continue;
    GpuSample m;
    m.index = *gpu;
    m.mig = *number;
    m.name = std::string(trim(line.substr(4, dev - 4)));
    m.uuid = std::string(line.substr(uuid + 6, close - uuid - 6));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace gpurun::gpuinfo

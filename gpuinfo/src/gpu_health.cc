// gpu_health.cc: the GPU health query (gpu_health.h): nvidia-smi's two CSV answers, parsed by
// pure functions, and the choice between NVML (gpu_health_nvml.cc) and nvidia-smi.
//
// What nvidia-smi prints for these fields (nvidia-smi(1) and --help-query-gpu, drivers 535-610):
//  - ecc.errors.uncorrected.volatile.total: a count since the driver loaded; "[N/A]" where ECC is
//    off or absent (GeForce boards).
//  - retired_pages.pending: "Yes" or "No"; "[N/A]" on boards that remap rows instead (Ampere on).
//  - --query-remapped-rows gpu_uuid,remapped_rows.pending,remapped_rows.failure: one row per GPU
//    that remaps rows; pending and failure print as "Yes"/"No" (some tools show 1/0: both read).
//  - "[Not Supported]" from older drivers, and other bracketed words ("[Unknown Error]", "[GPU
//    requires reset]"), mean the same to us: unknown.
//  - a GPU fallen off the bus is a line "Unable to determine the device handle for GPU1: ..."
//    instead of its row.
#include "gpurun/gpuinfo/gpu_health.h"

#include <fmt/format.h>

#include <charconv>

#include "gpu_health_nvml.h"
#include "gpurun/common/error.h"
#include "gpurun/common/run_capture.h"

namespace gpurun::gpuinfo {

using common::Error;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  while (true) {
    size_t at = line.find(',');
    out.push_back(trim(line.substr(0, at)));
    if (at == std::string_view::npos) return out;
    line.remove_prefix(at + 1);
  }
}

// Calls f on each non-empty line (trimmed).
template <class F>
void for_each_line(std::string_view text, F f) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty()) f(line);
  }
}

template <class N>
std::optional<N> number(std::string_view v) {
  N n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
  return n;
}

std::optional<bool> yes_no(std::string_view v) {
  if (v == "Yes" || v == "yes" || v == "1") return true;
  if (v == "No" || v == "no" || v == "0") return false;
  return std::nullopt;  // [N/A], [Not Supported], anything else
}

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 200 ? line.substr(0, 200) : line;
}

common::Captured run_smi(const SamplerConfig& cfg, const char* query, const char* fields) {
  return common::run_capture({cfg.nvidia_smi, fmt::format("--query-{}={}", query, fields),
                              "--format=csv,noheader,nounits"},
                             cfg.timeout_ms, common::kCaptureMaxBytes, cfg.cancel_fd);
}

HealthReport nvidia_smi_health(const SamplerConfig& cfg) {
  HealthReport r;
  r.source = "nvidia-smi " + cfg.nvidia_smi;
  common::Captured c = run_smi(cfg, "gpu", kNvidiaSmiHealthFields);
  if (c.timed_out || c.cancelled)
    throw Error(
        fmt::format("{} did not answer within {} ms (killed)", cfg.nvidia_smi, cfg.timeout_ms));
  HealthCsv csv = parse_nvidia_smi_health_csv(c.output);
  // As the sampler: an empty answer is fine when the driver says why (no devices, GPUs lost).
  bool explained = c.output.find("No devices were found") != std::string::npos;
  for (const auto& p : csv.problems)
    explained = explained || p.find("device handle") != std::string::npos;
  if (csv.gpus.empty() && !explained)
    throw Error(fmt::format("{} --query-gpu printed no GPU (exit {}): {}", cfg.nvidia_smi,
                            c.exit_code ? std::to_string(*c.exit_code) : "unknown",
                            c.output.empty() ? "nothing" : first_line(c.output)));
  r.gpus = std::move(csv.gpus);
  r.problems = std::move(csv.problems);
  if (r.gpus.empty()) return r;
  // Row remapping: a tool or board without it leaves remapping unknown.
  common::Captured remap = run_smi(cfg, "remapped-rows", kNvidiaSmiRemapFields);
  if (!remap.timed_out && !remap.cancelled && remap.exit_code == 0)
    apply_nvidia_smi_remap_csv(remap.output, r.gpus);
  return r;
}

}  // namespace

std::vector<std::string> health_faults(const GpuHealth& g) {
  std::vector<std::string> out;
  if (g.ecc_uncorrected && *g.ecc_uncorrected > 0)
    out.push_back(fmt::format("{} uncorrected ECC error{} since the driver loaded",
                              *g.ecc_uncorrected, *g.ecc_uncorrected == 1 ? "" : "s"));
  if (g.retired_pages_pending.value_or(false))
    out.emplace_back("memory pages pending retirement (reload the driver or reboot)");
  if (g.remap_pending.value_or(false))
    out.emplace_back("row remapping pending (the GPU needs a reset)");
  if (g.remap_failed.value_or(false))
    out.emplace_back("a row remapping failed (the GPU needs service)");
  return out;
}

HealthCsv parse_nvidia_smi_health_csv(std::string_view text) {
  HealthCsv out;
  for_each_line(text, [&](std::string_view line) {
    if (line == "No devices were found") return;
    auto f = fields(line);
    std::optional<int> index = f.size() == 4 ? number<int>(f[0]) : std::nullopt;
    if (!index || *index < 0 || *index > 1000000) {
      out.problems.emplace_back(line.substr(0, 200));
      return;
    }
    GpuHealth g;
    g.index = *index;
    g.uuid = std::string(f[1]);
    g.ecc_uncorrected = number<std::uint64_t>(f[2]);
    g.retired_pages_pending = yes_no(f[3]);
    out.gpus.push_back(std::move(g));
  });
  return out;
}

void apply_nvidia_smi_remap_csv(std::string_view text, std::vector<GpuHealth>& gpus) {
  for_each_line(text, [&](std::string_view line) {
    auto f = fields(line);
    if (f.size() != 3) return;
    for (auto& g : gpus) {
      if (g.uuid.empty() || g.uuid != f[0]) continue;
      g.remap_pending = yes_no(f[1]);
      g.remap_failed = yes_no(f[2]);
    }
  });
}

HealthReport read_gpu_health(const SamplerConfig& cfg_in) {
  SamplerConfig cfg = cfg_in;
  std::string nvml_why;
  if (cfg.nvidia_smi.empty()) {
    if (auto r = nvml_health(&nvml_why)) return *r;
    cfg.nvidia_smi = "nvidia-smi";  // the driver's tool, from PATH
  }
  try {
    return nvidia_smi_health(cfg);
  } catch (const Error& e) {
    if (nvml_why.empty()) throw;
    throw Error(fmt::format("{}; {}", nvml_why, e.what()));
  }
}

}  // namespace gpurun::gpuinfo

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
#include "nvidia_smi_text.h"
#include "gpurun/common/error.h"
#include "gpurun/common/run_capture.h"

namespace gpurun::gpuinfo {

using common::Error;

namespace {

using smi::trim;

std::vector<std::string_view> fields(std::string_view line) {
  return smi::split(line, ',');
}

using smi::for_each_line;

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

common::Captured run_smi(const SamplerConfig& cfg, const char* query, const char* fields) {
  return smi::run(cfg, {fmt::format("--query-{}={}", query, fields), "--format=csv,noheader,nounits"});
}

HealthReport nvidia_smi_health(const SamplerConfig& cfg) {
  HealthReport r;
  r.source = "nvidia-smi " + cfg.nvidia_smi;
  common::Captured c = run_smi(cfg, "gpu", kNvidiaSmiHealthFields);
  HealthCsv csv = parse_nvidia_smi_health_csv(c.output);
  smi::expect_gpu_rows(cfg, c, !csv.gpus.empty(), csv.problems);
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

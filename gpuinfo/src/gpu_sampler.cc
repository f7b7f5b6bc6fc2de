// gpu_sampler.cc: GpuSampler (gpu_sampler.h): picks NVML or nvidia-smi once, then samples.
#include "gpurun/gpuinfo/gpu_sampler.h"

#include <fmt/format.h>

#include <chrono>

#include "gpu_nvml.h"
#include "nvidia_smi_text.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/error.h"
#include "gpurun/common/run_capture.h"

namespace gpurun::gpuinfo {

using common::Captured;
using common::Error;
using common::kCaptureMaxBytes;
using common::run_capture;
namespace {

int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// nvidia-smi's CSV, and `nvidia-smi -L` for the MIG devices of GPUs in MIG mode.
void sample_nvidia_smi(const SamplerConfig& cfg, GpuSnapshot& out) {
  Captured c = smi::run(
      cfg, {std::string("--query-gpu=") + kNvidiaSmiQueryFields, "--format=csv,noheader,nounits"});
  NvidiaSmiCsv csv = parse_nvidia_smi_csv(c.output);
  smi::expect_gpu_rows(cfg, c, !csv.gpus.empty(), csv.problems);
  out.problems = std::move(csv.problems);
  if (csv.mig_enabled.empty()) {
    out.gpus = std::move(csv.gpus);
    return;
  }
  Captured list = smi::run(cfg, {"-L"});
  std::vector<GpuSample> migs = parse_nvidia_smi_mig_list(list.output);
  for (auto& g : csv.gpus) {
    int index = g.index;
    out.gpus.push_back(std::move(g));
    for (const auto& m : migs)
      if (m.index == index) out.gpus.push_back(m);
  }
}

// --query-compute-apps: a failure leaves processes_read false, naming why; it never fails the
// sample, whose figures stand on their own. A list with a line that is not a process is no list
// (an nvidia-smi that does not know the query says so in words); the exit status is not relied
// on, since an owner that ignores SIGCHLD (gpuq's daemon) cannot have it.
void sample_nvidia_smi_processes(const SamplerConfig& cfg, GpuSnapshot& out) {
  Captured c = smi::run(cfg, {std::string("--query-compute-apps=") +
                                        kNvidiaSmiComputeAppsFields,
                                    "--format=csv,noheader,nounits"});
  std::vector<std::string> problems;
  std::vector<GpuProcess> listed = parse_nvidia_smi_compute_apps(c.output, &problems);
  const bool failed = c.exit_code && *c.exit_code != 0;
  if (c.timed_out || failed || !problems.empty()) {
    out.processes_error = fmt::format(
        "{} --query-compute-apps {}", cfg.nvidia_smi,
        c.timed_out ? fmt::format("did not answer within {} ms", cfg.timeout_ms)
        : failed    ? fmt::format("exit {}: {}", *c.exit_code, smi::first_line(c.output))
                    : "printed what is not a process: " + problems.front());
    return;
  }
  out.processes = std::move(listed);
  out.processes_read = true;
}

// The physical GPU of each process, by UUID (a MIG device's UUID names its GPU's index).
void index_processes(GpuSnapshot& s) {
  for (auto& p : s.processes)
    for (const auto& g : s.gpus)
      if (!g.uuid.empty() && g.uuid == p.gpu_uuid) p.gpu = g.index;
}

}  // namespace

struct GpuSampler::Impl {
  SamplerConfig cfg;
  std::unique_ptr<NvmlBackend> nvml;
  std::string host = common::hostname();
};

GpuSampler::GpuSampler(SamplerConfig cfg) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(cfg);
  if (impl_->cfg.nvidia_smi.empty()) {
    std::string why;
    impl_->nvml = NvmlBackend::open(&why);
    if (!impl_->nvml) impl_->cfg.nvidia_smi = "nvidia-smi";  // the driver's tool, from PATH
  }
}

GpuSampler::~GpuSampler() = default;
GpuSampler::GpuSampler(GpuSampler&&) noexcept = default;
GpuSampler& GpuSampler::operator=(GpuSampler&&) noexcept = default;

std::string GpuSampler::backend() const {
  return impl_->nvml ? "nvml (libnvidia-ml.so.1)" : "nvidia-smi " + impl_->cfg.nvidia_smi;
}

GpuSnapshot GpuSampler::sample() {
  GpuSnapshot s;
  s.time_ms = wall_ms();
  s.host = impl_->host;
  if (impl_->nvml) {
    s.source = "nvml";
    impl_->nvml->sample(s, impl_->cfg.processes);
  } else {
    s.source = "nvidia-smi";
    sample_nvidia_smi(impl_->cfg, s);
    if (impl_->cfg.processes) sample_nvidia_smi_processes(impl_->cfg, s);
  }
  index_processes(s);
  return s;
}

const GpuSample* GpuSnapshot::gpu(int index) const {
  for (const auto& g : gpus)
    if (g.index == index && g.mig < 0) return &g;
  return nullptr;
}

}  // namespace gpurun::gpuinfo

// gpu_sampler.h: what each GPU of this machine is doing now: utilisation, memory used and total,
// power and temperature. Read through NVML, loaded at run time (dlopen of libnvidia-ml.so.1, so
// nothing links against the driver), or, where NVML cannot be loaded or when a config names one,
// through `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`. The parsers are pure
// functions over nvidia-smi's text, and a snapshot travels as one line of text (encode_snapshot),
// so the queue's daemon and gpurun's rank wrapper can both sample and pass samples on.
// With SamplerConfig::processes, also the compute processes on each GPU. Per-process CPU time and
// memory: proc_usage.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpurun::gpuinfo {

// One GPU, or one MIG device of a GPU, at one moment. A figure the driver cannot give ([N/A],
// [Not Supported], NVML_ERROR_NOT_SUPPORTED: GPU utilisation in MIG mode, power on some boards) is
// nullopt, never 0, so a mean never counts it.
struct GpuSample {
  int index = -1;    // the physical GPU's index as nvidia-smi and NVML number it (gpuq's GPU id)
  int mig = -1;      // the MIG device's number under that GPU; -1 for the GPU itself
  std::string uuid;  // GPU-... or MIG-...
  std::string name;  // product name, or the MIG profile ("1g.10gb")
  std::optional<double> util_percent;  // 0-100
  std::optional<double> mem_used_mib;
  std::optional<double> mem_total_mib;
  std::optional<double> power_w;
  std::optional<double> temp_c;
};

// A process with a compute context on a GPU (nvidia-smi's compute apps, NVML's running compute
// processes). Its pid is in the driver's pid namespace: the host's.
struct GpuProcess {
  int gpu = -1;          // the physical GPU's index; -1 when its UUID matched no GPU listed
  std::string gpu_uuid;  // as the driver listed it (GPU-..., or MIG-... where the driver says)
  int pid = 0;
  std::optional<double> used_mib;  // nullopt where the driver cannot tell (MIG, WDDM)
};

struct GpuSnapshot {
  int64_t time_ms = 0;          // wall clock, milliseconds since the epoch
  std::string host;             // the machine sampled
  std::string source;           // "nvml" or "nvidia-smi"
  std::vector<GpuSample> gpus;  // physical GPUs in index order, each followed by its MIG devices
  // GPUs that the driver listed but could not read (a GPU fallen off the bus), in its words.
  std::vector<std::string> problems;
  // Compute processes, read only when SamplerConfig::processes asks. processes_read is false when
  // they could not be read (processes_error says why): no list is not the same as an empty one.
  std::vector<GpuProcess> processes;
  bool processes_read = false;
  std::string processes_error;

  const GpuSample* gpu(int index) const;  // the physical GPU with this index, or nullptr
};

struct SamplerConfig {
  // Non-empty: run this nvidia-smi and never NVML (GPURUN_NVIDIA_SMI; tests point it at a script
  // that prints fixture CSV). Empty: NVML, else `nvidia-smi` from PATH.
  std::string nvidia_smi;
  // nvidia-smi can hang on a GPU that is falling off the bus: it is killed after this long.
  int timeout_ms = 10000;
  // A file descriptor (>= 0) that turns readable when the sampler's owner stops: an nvidia-smi
  // under way is killed then, and sample() throws, so stopping never waits out the timeout.
  // An NVML call cannot be cut short.
  int cancel_fd = -1;
  // Also list each GPU's compute processes (one more nvidia-smi call per sample): gpuq asks, to
  // keep GPUs that someone uses outside the queue out of it.
  bool processes = false;
};

// Samples this machine's GPUs. Not thread-safe: one sampler per thread.
class GpuSampler {
 public:
  explicit GpuSampler(SamplerConfig cfg = {});
  ~GpuSampler();
  GpuSampler(GpuSampler&&) noexcept;
  GpuSampler& operator=(GpuSampler&&) noexcept;

  // Throws Error (gpurun/launcher/error.h) naming the backend when it cannot answer at all (no
  // driver, nvidia-smi missing, hung or printing nothing it understands). A GPU that vanished is
  // not an error: it is missing from gpus and named in problems.
  GpuSnapshot sample();
  std::string backend() const;  // "nvml (libnvidia-ml.so.1)" or "nvidia-smi PATH"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The fields the nvidia-smi backend asks for, in this order.
inline constexpr const char* kNvidiaSmiQueryFields =
    "index,uuid,name,mig.mode.current,utilization.gpu,memory.used,memory.total,power.draw,"
    "temperature.gpu";

struct NvidiaSmiCsv {
  std::vector<GpuSample> gpus;
  std::vector<std::string> problems;  // lines that are not rows ("Unable to determine ...")
  std::vector<int> mig_enabled;       // indices of GPUs whose mig.mode.current is Enabled
};
// Parses the output of --query-gpu=kNvidiaSmiQueryFields --format=csv,noheader,nounits. Never
// throws: a line it cannot read is kept, cut to 200 bytes, in problems.
NvidiaSmiCsv parse_nvidia_smi_csv(std::string_view text);

// The fields asked of --query-compute-apps, in this order.
inline constexpr const char* kNvidiaSmiComputeAppsFields = "gpu_uuid,pid,used_memory";
// Parses --query-compute-apps=kNvidiaSmiComputeAppsFields --format=csv,noheader,nounits (gpu is
// left -1: the caller maps UUIDs to indices). Never throws: other lines go to *problems.
std::vector<GpuProcess> parse_nvidia_smi_compute_apps(std::string_view text,
                                                      std::vector<std::string>* problems);

// Parses `nvidia-smi -L` and returns its MIG devices ("  MIG 1g.10gb Device 0: (UUID: MIG-...)"),
// each with the index of the GPU line above it. Never throws; other lines are ignored.
std::vector<GpuSample> parse_nvidia_smi_mig_list(std::string_view text);

// A snapshot as one line of printable ASCII without spaces inside fields (strings are
// percent-encoded), for a control socket or a log, and back. decode_snapshot throws Error naming
// the field that is malformed.
std::string encode_snapshot(const GpuSnapshot& s);
GpuSnapshot decode_snapshot(std::string_view line);

}  // namespace gpurun::gpuinfo

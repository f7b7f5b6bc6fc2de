// gpu_count.cc: count_gpus (gpu_count.h).
#include "gpurun/gpuinfo/gpu_count.h"

#include <exception>

#include "gpurun/common/posix.h"

namespace gpurun::gpuinfo {
namespace {

// One folder per GPU, named by its PCI address; numbered here in that order, as the driver
// numbers them with CUDA_DEVICE_ORDER=PCI_BUS_ID.
std::vector<int> proc_driver_gpus(const std::string& folder) {
  std::vector<int> ids;
  for (const std::string& name : common::list_dir(folder).value_or(std::vector<std::string>{}))
    if (name[0] != '.') ids.push_back(static_cast<int>(ids.size()));
  return ids;
}

}  // namespace

GpuCount count_gpus(const SamplerConfig& cfg, const std::string& proc_root) {
  GpuCount c;
  try {
    GpuSampler sampler(cfg);
    const GpuSnapshot snap = sampler.sample();
    for (const auto& g : snap.gpus)
      if (g.mig < 0) c.ids.push_back(g.index);
    c.source = snap.source;
    if (!c.ids.empty()) return c;
    c.why_none = snap.source + " lists none";
  } catch (const std::exception& e) {
    c.why_none = e.what();
  }
  const std::string folder = proc_root + "/driver/nvidia/gpus";
  c.ids = proc_driver_gpus(folder);
  c.source = c.ids.empty() ? "" : folder;
  if (c.ids.empty()) c.why_none += "; " + folder + " lists none";
  return c;
}

}  // namespace gpurun::gpuinfo

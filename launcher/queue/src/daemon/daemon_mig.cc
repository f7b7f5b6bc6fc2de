// gpuq daemon: MIG devices scheduled as GPUs (issue 30, item 2). At start the daemon's sampler
// lists the MIG devices of GPUs in MIG mode (NVML, or `nvidia-smi -L`); each becomes a GPU of the
// pool with an id of its own (mig_id), its profile as its type (--gres=gpu:1g.10gb:1 asks for
// one), and its MIG- UUID in a job's CUDA_VISIBLE_DEVICES, as NVIDIA's MIG User Guide says CUDA
// addresses MIG devices.
#include <fmt/format.h>

#include <algorithm>

#include "daemon/daemon.h"

namespace gpurun::queue {

std::vector<int> with_mig_devices(const std::vector<int>& gpus, const gpuinfo::GpuSnapshot& s,
                                  std::map<int, gpuinfo::GpuSample>* mig) {
  std::vector<int> out;
  for (int g : gpus) {
    bool split = false;
    for (const auto& d : s.gpus) {
      if (d.index != g || d.mig < 0 || d.mig > 9) continue;
      out.push_back(mig_id(g, d.mig));
      (*mig)[mig_id(g, d.mig)] = d;
      split = true;
    }
    if (!split) out.push_back(g);
  }
  return out;
}

const gpuinfo::GpuSample* Daemon::sample_of(const gpuinfo::GpuSnapshot& s, int id) const {
  auto m = cfg_.mig.find(id);
  if (m == cfg_.mig.end()) return s.gpu(id);
  for (const auto& d : s.gpus)
    if (d.index == m->second.index && d.mig == m->second.mig) return &d;
  return nullptr;
}

int Daemon::mig_devices_of(const std::string& profile) const {
  return static_cast<int>(std::count_if(cfg_.mig.begin(), cfg_.mig.end(), [&](const auto& m) {
    return m.second.name == profile;
  }));
}

std::string Daemon::visible_devices(const std::vector<int>& ids) const {
  std::string out;
  for (int id : ids) {
    auto m = cfg_.mig.find(id);
    out += (out.empty() ? "" : ",") + (m == cfg_.mig.end() ? std::to_string(id) : m->second.uuid);
  }
  return out;
}

}  // namespace gpurun::queue

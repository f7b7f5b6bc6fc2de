// Fuzz target for what the GPU sampler reads: nvidia-smi's CSV and -L listing, and the one-line
// snapshot encoding. Any input must parse (never throwing) or, for a snapshot line, throw only
// gpurun::common::Error; never crash or hang. Whatever the CSV parser accepts must survive an
// encode/decode round trip unchanged. Built as a libFuzzer target where the compiler supports it;
// otherwise tests/queue/fuzz_driver.cc feeds it a corpus and seeded mutations.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gpurun/common/error.h"
#include "gpurun/gpuinfo/gpu_sampler.h"

using gpurun::common::Error;
namespace gpuinfo = gpurun::gpuinfo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  gpuinfo::NvidiaSmiCsv csv = gpuinfo::parse_nvidia_smi_csv(text);
  gpuinfo::GpuSnapshot s;
  s.time_ms = 1;
  s.gpus = csv.gpus;
  for (auto& m : gpuinfo::parse_nvidia_smi_mig_list(text)) s.gpus.push_back(std::move(m));
  s.problems = csv.problems;
  gpuinfo::GpuSnapshot back = gpuinfo::decode_snapshot(gpuinfo::encode_snapshot(s));
  if (back.gpus.size() != s.gpus.size() || back.problems != s.problems) std::abort();
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    const gpuinfo::GpuSample &a = s.gpus[i], &b = back.gpus[i];
    if (a.index != b.index || a.mig != b.mig || a.uuid != b.uuid || a.name != b.name ||
        a.util_percent != b.util_percent || a.mem_used_mib != b.mem_used_mib ||
        a.power_w != b.power_w || a.temp_c != b.temp_c)
      std::abort();
  }
  try {
    gpuinfo::decode_snapshot(text);
  } catch (const Error&) {
  }
  return 0;
}

extern "C" const char* FuzzAlphabet() {
  return ", \n\r\t[]N/ASupportedEnabledDisabled0123456789.-e%=:gpus/1 t=g=p=MIG-UUID()\xff";
}

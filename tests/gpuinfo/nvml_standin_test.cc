// nvml_standin_test: the GPU sampler's and the health query's NVML paths (gpuinfo/src/gpu_nvml.cc,
// gpu_health_nvml.cc), which no machine of this project has a GPU to run, run here against the
// NVML stand-in (nvml_standin.cc: libnvidia-ml.so.1 answering from a JSON fixture; CTest puts its
// folder on LD_LIBRARY_PATH). What they check is what the code does with NVML's answers: every
// figure, processes, a lost GPU, unsupported figures, the health faults, and that each
// nvmlInit_v2 has its nvmlShutdown. Not a GPU measurement.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gpurun/gpuinfo/gpu_health.h"
#include "gpurun/gpuinfo/gpu_sampler.h"

namespace gpuinfo = gpurun::gpuinfo;

namespace {

// Writes the stand-in's fixture and points it there (read at the next first nvmlInit_v2). The
// file is this process's own: CTest runs each test as a process, several at once, and a shared
// name let one test read another's half-written fixture.
void fixture(const std::string& json) {
  const std::string path =
      ::testing::TempDir() + "nvml_standin_fixture." + std::to_string(getpid()) + ".json";
  static const std::string removed_at_exit = path;
  static const int registered = std::atexit([] { unlink(removed_at_exit.c_str()); });
  (void)registered;
  std::ofstream(path) << json;
  ASSERT_EQ(setenv("GPURUN_NVML_STANDIN", path.c_str(), 1), 0);
}

// The stand-in's count of open initialisations (-1 when it is not loaded).
int open_inits() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return -1;
  auto inits = reinterpret_cast<int (*)()>(dlsym(lib, "gpurun_nvml_standin_inits"));
  const int n = inits ? inits() : -1;
  dlclose(lib);
  return n;
}

const char* kTwoGpus = R"({"gpus": [
  {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-11111111-2222-3333-4444-555555555555",
   "util": 37, "mem_util": 5, "mem_total_mib": 81559, "mem_used_mib": 1024, "power_mw": 123456,
   "temp_c": 45, "processes": [{"pid": 4242, "used_mib": 500}, {"pid": 4343}]},
  {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-66666666-7777-8888-9999-000000000000",
   "util": 0, "mem_util": 0, "mem_total_mib": 81559, "mem_used_mib": 3, "power_mw": 70000,
   "temp_c": 31, "not_supported": ["power", "temp"]}]})";

}  // namespace

TEST(NvmlStandin, TheSamplerReadsEveryFigureThroughNvml) {
  fixture(kTwoGpus);
  {
    gpuinfo::SamplerConfig cfg;
    cfg.processes = true;
    gpuinfo::GpuSampler sampler(cfg);
    ASSERT_EQ(sampler.backend().rfind("nvml", 0), 0u) << sampler.backend();
    const gpuinfo::GpuSnapshot s = sampler.sample();
    EXPECT_EQ(s.source, "nvml");
    ASSERT_EQ(s.gpus.size(), 2u);
    const gpuinfo::GpuSample& a = s.gpus[0];
    EXPECT_EQ(a.index, 0);
    EXPECT_EQ(a.uuid, "GPU-11111111-2222-3333-4444-555555555555");
    EXPECT_EQ(a.name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(a.util_percent, 37.0);
    EXPECT_EQ(a.mem_used_mib, 1024.0);
    EXPECT_EQ(a.mem_total_mib, 81559.0);
    EXPECT_EQ(a.power_w, 123.456);
    EXPECT_EQ(a.temp_c, 45.0);
    // Unsupported figures are unknown, never 0.
    EXPECT_FALSE(s.gpus[1].power_w.has_value());
    EXPECT_FALSE(s.gpus[1].temp_c.has_value());
    EXPECT_EQ(s.gpus[1].util_percent, 0.0);
    ASSERT_TRUE(s.processes_read) << s.processes_error;
    ASSERT_EQ(s.processes.size(), 2u);
    EXPECT_EQ(s.processes[0].pid, 4242);
    EXPECT_EQ(s.processes[0].gpu, 0);
    EXPECT_EQ(s.processes[0].used_mib, 500.0);
    EXPECT_EQ(s.processes[1].pid, 4343);
    EXPECT_FALSE(s.processes[1].used_mib.has_value()) << "NVML_VALUE_NOT_AVAILABLE is unknown";
    EXPECT_EQ(open_inits(), 1);
  }
  EXPECT_EQ(open_inits(), 0) << "the sampler did not shut NVML down";
}

TEST(NvmlStandin, ALostGpuIsNamedAndTheOthersAreRead) {
  fixture(R"({"gpus": [
    {"uuid": "GPU-aaaa", "util": 10, "mem_total_mib": 100, "mem_used_mib": 1, "power_mw": 1000,
     "temp_c": 30},
    {"uuid": "GPU-bbbb", "lost": true}]})");
  gpuinfo::GpuSampler sampler;
  ASSERT_EQ(sampler.backend().rfind("nvml", 0), 0u) << sampler.backend();
  const gpuinfo::GpuSnapshot s = sampler.sample();
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].uuid, "GPU-aaaa");
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_NE(s.problems[0].find("GPU is lost"), std::string::npos) << s.problems[0];
  EXPECT_NE(s.problems[0].find('1'), std::string::npos) << "names the GPU: " << s.problems[0];
}

TEST(NvmlStandin, TheHealthQueryReadsFaultsThroughNvml) {
  fixture(R"({"gpus": [
    {"uuid": "GPU-ok", "ecc_uncorrected": 0, "retired_pending": false, "remap_pending": false,
     "remap_failed": false},
    {"uuid": "GPU-sick", "ecc_uncorrected": 2, "retired_pending": true, "remap_pending": true,
     "remap_failed": true},
    {"uuid": "GPU-old", "not_supported": ["ecc", "retired_pages", "remapped_rows"]},
    {"uuid": "GPU-gone", "lost": true}]})");
  const gpuinfo::HealthReport r = gpuinfo::read_gpu_health({});
  EXPECT_EQ(r.source, "nvml");
  ASSERT_EQ(r.gpus.size(), 3u);
  EXPECT_TRUE(gpuinfo::health_faults(r.gpus[0]).empty());
  EXPECT_EQ(r.gpus[1].uuid, "GPU-sick");
  EXPECT_EQ(r.gpus[1].ecc_uncorrected, 2u);
  EXPECT_EQ(r.gpus[1].retired_pages_pending, true);
  EXPECT_EQ(r.gpus[1].remap_pending, true);
  EXPECT_EQ(r.gpus[1].remap_failed, true);
  EXPECT_GE(gpuinfo::health_faults(r.gpus[1]).size(), 3u);
  EXPECT_FALSE(r.gpus[2].ecc_uncorrected.has_value()) << "unsupported is unknown, not 0";
  EXPECT_FALSE(r.gpus[2].remap_failed.has_value());
  EXPECT_TRUE(gpuinfo::health_faults(r.gpus[2]).empty());
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("GPU 3"), std::string::npos) << r.problems[0];
  EXPECT_EQ(open_inits(), 0) << "the health query did not shut NVML down";
}

TEST(NvmlStandin, NvmlThatCannotStartIsSaidAndLeftClosed) {
  ASSERT_EQ(setenv("GPURUN_NVML_STANDIN", "/nonexistent/fixture.json", 1), 0);
  gpuinfo::SamplerConfig cfg;
  cfg.nvidia_smi = "";  // NVML first; no nvidia-smi on PATH in this test's environment
  gpuinfo::GpuSampler sampler(cfg);
  EXPECT_NE(sampler.backend().rfind("nvml", 0), 0u) << sampler.backend();
  EXPECT_EQ(open_inits(), 0);
}

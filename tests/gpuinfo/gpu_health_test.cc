// gpu_health_test.cc: the GPU health query (gpu_health.h) that gpurun's --preflight asks: its
// parsers over nvidia-smi's CSV (unknown figures stay unknown), what counts as a fault, and
// read_gpu_health against the fake nvidia-smi-health-* scripts (fixtures/nvidia-smi).
#include "gpurun/gpuinfo/gpu_health.h"

#include <gtest/gtest.h>

#include <string>

#include "gpurun/common/error.h"

using gpurun::common::Error;
namespace gpuinfo = gpurun::gpuinfo;

namespace {

std::string fixture(const std::string& name) {
  return std::string(GPURUN_FIXTURES) + "/nvidia-smi/" + name;
}

gpuinfo::HealthReport health_of(const std::string& script) {
  gpuinfo::SamplerConfig cfg;
  cfg.nvidia_smi = fixture(script);
  return gpuinfo::read_gpu_health(cfg);
}

std::vector<std::string> all_faults(const gpuinfo::HealthReport& r) {
  std::vector<std::string> out;
  for (const auto& g : r.gpus)
    for (const auto& f : gpuinfo::health_faults(g))
      out.push_back("GPU " + std::to_string(g.index) + ": " + f);
  return out;
}

TEST(GpuHealthParse, ReadsCountsAndFlags) {
  auto csv = gpuinfo::parse_nvidia_smi_health_csv(
      "0, GPU-a, 0, No\n1, GPU-b, 7, Yes\r\n\n2, GPU-c, [N/A], [Not Supported]\n");
  ASSERT_EQ(csv.gpus.size(), 3u);
  EXPECT_TRUE(csv.problems.empty());
  EXPECT_EQ(csv.gpus[0].index, 0);
  EXPECT_EQ(csv.gpus[0].uuid, "GPU-a");
  EXPECT_EQ(csv.gpus[0].ecc_uncorrected, 0u);
  EXPECT_EQ(csv.gpus[0].retired_pages_pending, false);
  EXPECT_EQ(csv.gpus[1].ecc_uncorrected, 7u);
  EXPECT_EQ(csv.gpus[1].retired_pages_pending, true);
  // [N/A] and [Not Supported] are unknown: not 0, not a fault.
  EXPECT_FALSE(csv.gpus[2].ecc_uncorrected.has_value());
  EXPECT_FALSE(csv.gpus[2].retired_pages_pending.has_value());
  EXPECT_TRUE(gpuinfo::health_faults(csv.gpus[2]).empty());
  // Remapping is not part of this query: unknown until the remapped-rows answer sets it.
  EXPECT_FALSE(csv.gpus[1].remap_pending.has_value());
}

TEST(GpuHealthParse, KeepsLinesThatAreNoRowsAsProblems) {
  auto csv = gpuinfo::parse_nvidia_smi_health_csv(
      "0, GPU-a, 0, No\n"
      "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error\n"
      "No devices were found\n"
      "2, GPU-c, -3, No\n");  // a negative count is no count: the line is not a row
  ASSERT_EQ(csv.gpus.size(), 2u);
  EXPECT_FALSE(csv.gpus[1].ecc_uncorrected.has_value());
  ASSERT_EQ(csv.problems.size(), 1u);
  EXPECT_EQ(csv.problems[0],
            "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error");
}

TEST(GpuHealthParse, RemappedRowsByUuid) {
  std::vector<gpuinfo::GpuHealth> gpus(3);
  gpus[0].uuid = "GPU-a", gpus[1].uuid = "GPU-b", gpus[2].uuid = "GPU-c";
  gpuinfo::apply_nvidia_smi_remap_csv(
      "GPU-b, Yes, No\nGPU-c, 0, 1\nGPU-zz, Yes, Yes\ngarbage\nGPU-a, [N/A], [N/A]\n", gpus);
  EXPECT_FALSE(gpus[0].remap_pending.has_value());
  EXPECT_FALSE(gpus[0].remap_failed.has_value());
  EXPECT_EQ(gpus[1].remap_pending, true);
  EXPECT_EQ(gpus[1].remap_failed, false);
  EXPECT_EQ(gpus[2].remap_pending, false);
  EXPECT_EQ(gpus[2].remap_failed, true);
}

TEST(GpuHealthFaults, NamesEachFault) {
  gpuinfo::GpuHealth g;
  EXPECT_TRUE(gpuinfo::health_faults(g).empty());  // nothing known, nothing wrong
  g.ecc_uncorrected = 0, g.retired_pages_pending = false, g.remap_pending = false,
  g.remap_failed = false;
  EXPECT_TRUE(gpuinfo::health_faults(g).empty());
  g.ecc_uncorrected = 1, g.retired_pages_pending = true, g.remap_pending = true,
  g.remap_failed = true;
  EXPECT_EQ(
      gpuinfo::health_faults(g),
      (std::vector<std::string>{"1 uncorrected ECC error since the driver loaded",
                                "memory pages pending retirement (reload the driver or reboot)",
                                "row remapping pending (the GPU needs a reset)",
                                "a row remapping failed (the GPU needs service)"}));
}

TEST(GpuHealthFixtures, Healthy) {
  auto r = health_of("nvidia-smi-health-ok");
  EXPECT_EQ(r.source, "nvidia-smi " + fixture("nvidia-smi-health-ok"));
  ASSERT_EQ(r.gpus.size(), 4u);
  EXPECT_TRUE(r.problems.empty());
  EXPECT_TRUE(all_faults(r).empty());
  EXPECT_EQ(r.gpus[3].remap_pending, false);  // the second query was asked and read
}

TEST(GpuHealthFixtures, UncorrectedEcc) {
  EXPECT_EQ(all_faults(health_of("nvidia-smi-health-ecc")),
            (std::vector<std::string>{"GPU 1: 2 uncorrected ECC errors since the driver loaded"}));
}

TEST(GpuHealthFixtures, RowRemapping) {
  EXPECT_EQ(all_faults(health_of("nvidia-smi-health-remap")),
            (std::vector<std::string>{"GPU 2: row remapping pending (the GPU needs a reset)",
                                      "GPU 3: a row remapping failed (the GPU needs service)"}));
}

TEST(GpuHealthFixtures, NotReportedIsNoFault) {
  auto r = health_of("nvidia-smi-health-na");
  ASSERT_EQ(r.gpus.size(), 4u);
  EXPECT_TRUE(all_faults(r).empty());
  EXPECT_TRUE(r.problems.empty());
}

TEST(GpuHealthFixtures, LostGpuIsAProblem) {
  auto r = health_of("nvidia-smi-health-lost");
  ASSERT_EQ(r.gpus.size(), 3u);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("Unable to determine the device handle for GPU1"),
            std::string::npos);
}

TEST(GpuHealthFixtures, AToolThatCannotAnswerThrows) {
  // The sampler's fixture refuses the health query (exit 2): no GPU printed, no reason given.
  try {
    health_of("nvidia-smi-4gpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--query-gpu printed no GPU (exit 2)"), std::string::npos)
        << e.what();
  }
  gpuinfo::SamplerConfig cfg;
  cfg.nvidia_smi = "/nonexistent/nvidia-smi";
  EXPECT_THROW(gpuinfo::read_gpu_health(cfg), Error);
}

}  // namespace

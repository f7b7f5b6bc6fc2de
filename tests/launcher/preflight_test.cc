// preflight_test.cc: --preflight's decisions without GPUs, nodes or a network: which GPUs of the
// plan a health report misses or finds unhealthy (wrapper/node_checks.h), TMPDIR's room, the
// slow-link rule, the mode and size options (supervisor/preflight.h), and the echo exchange of
// --preflight-bandwidth over loopback. Attempt's GO rule with preflight is in attempt_test.cc.
#include "supervisor/preflight.h"

#include <gtest/gtest.h>

#include "gpurun/common/error.h"
#include "wrapper/node_checks.h"

namespace gpurun::launcher {
namespace {

gpuinfo::GpuHealth healthy(int index, const std::string& uuid) {
  gpuinfo::GpuHealth g;
  g.index = index;
  g.uuid = uuid;
  g.ecc_uncorrected = 0;
  g.retired_pages_pending = false;
  return g;
}

gpuinfo::HealthReport four_gpus() {
  gpuinfo::HealthReport r;
  r.source = "nvidia-smi /x/nvidia-smi";
  for (int i = 0; i < 4; ++i) r.gpus.push_back(healthy(i, "GPU-" + std::to_string(i)));
  return r;
}

// The job's GPUs on a node: `ids` (CUDA names) owned by ranks 0, 1, ... of the node's list.
monitor::JobGpus job(std::vector<std::string> ids, std::vector<std::string> visible = {}) {
  monitor::JobGpus j;
  j.ids = ids;
  for (std::size_t i = 0; i < ids.size(); ++i) j.owner.push_back(static_cast<int>(i));
  j.visible = visible.empty() ? ids : visible;
  return j;
}

TEST(PreflightGpus, HealthyGpusPass) {
  EXPECT_TRUE(node_checks::gpu_failures(four_gpus(), job({"0", "1", "2", "3"})).empty());
  EXPECT_TRUE(node_checks::gpu_failures(four_gpus(), job({"1", "3"})).empty());
  EXPECT_TRUE(node_checks::gpu_failures(four_gpus(), job({"GPU-2"})).empty());
}

TEST(PreflightGpus, FewerGpusThanPlannedIsNamed) {
  auto f = node_checks::gpu_failures(four_gpus(), job({"0", "1", "2", "3", "4", "5"}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0],
            "GPU count differs from the plan: 6 GPUs planned here, 4 found (missing: 4, 5; "
            "nvidia-smi lists 0,1,2,3)");
  f = node_checks::gpu_failures(four_gpus(), job({"GPU-9"}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].find("1 GPU planned here, 0 found (missing: GPU-9;"), std::string::npos) << f[0];
}

TEST(PreflightGpus, UnhealthyJobGpusAreNamedWithTheirRank) {
  auto h = four_gpus();
  h.gpus[1].ecc_uncorrected = 2;
  h.gpus[3].remap_failed = true;
  EXPECT_EQ(node_checks::gpu_failures(h, job({"0", "1"})),
            (std::vector<std::string>{
                "GPU 1 (rank 1): 2 uncorrected ECC errors since the driver loaded"}));
  // GPU 3 is not the job's: its fault does not fail this job's node.
  EXPECT_EQ(
      node_checks::gpu_failures(h, job({"3", "0"})),
      (std::vector<std::string>{"GPU 3 (rank 0): a row remapping failed (the GPU needs service)"}));
}

TEST(PreflightGpus, UnknownFiguresAreNoFault) {
  gpuinfo::HealthReport h;
  h.source = "nvml";
  h.gpus.push_back(
      gpuinfo::GpuHealth{0, "GPU-0", std::nullopt, std::nullopt, std::nullopt, std::nullopt});
  EXPECT_TRUE(node_checks::gpu_failures(h, job({"0"})).empty());
}

TEST(PreflightGpus, AGpuTheDriverCannotReadFailsTheNode) {
  auto h = four_gpus();
  h.gpus.erase(h.gpus.begin() + 2);
  h.problems.push_back(
      "Unable to determine the device handle for GPU2: 0000:34:00.0: Unknown Error");
  auto f = node_checks::gpu_failures(h, job({"0", "1"}));  // not even the job's GPU
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0],
            "the driver cannot read a GPU: Unable to determine the device handle for GPU2: "
            "0000:34:00.0: Unknown Error");
}

// Inside Slurm's device cgroup the driver numbers the job's GPUs from 0 while the node's list
// keeps the node's numbers (monitor::keep_job_gpus): GPUs 4,5 of the node are the listed 0,1.
TEST(PreflightGpus, CgroupRenumberingIsNoMissingGpu) {
  gpuinfo::HealthReport h;
  h.source = "nvidia-smi nvidia-smi";
  h.gpus = {healthy(0, "GPU-a"), healthy(1, "GPU-b")};
  h.gpus[1].ecc_uncorrected = 1;
  EXPECT_EQ(node_checks::gpu_failures(h, job({"4", "5"})),
            (std::vector<std::string>{
                "GPU 5 (rank 1): 1 uncorrected ECC error since the driver loaded"}));
}

TEST(PreflightTmp, RoomIsChecked) {
  EXPECT_FALSE(node_checks::tmp_failure("/tmp", 2ull << 30, 1ull << 30).has_value());
  EXPECT_FALSE(node_checks::tmp_failure("/tmp", 0, 0).has_value()) << "0: not checked";
  EXPECT_EQ(node_checks::tmp_failure("/scratch", 512ull << 20, 1ull << 30),
            "TMPDIR /scratch has 512 MiB free, under the 1024 MiB --preflight-min-tmp asks");
  EXPECT_EQ(node_checks::tmp_failure("/nope", std::nullopt, 1, "No such file or directory"),
            "TMPDIR /nope: cannot read its free space: No such file or directory (set TMPDIR?)");
}

TEST(PreflightTmp, CheckNodeWithoutGpusRunsNoGpuQuery) {
  gpuinfo::SamplerConfig cfg;
  cfg.nvidia_smi = "/nonexistent/nvidia-smi";  // would be a note if it were asked
  auto r = node_checks::check_node(cfg, job({}), false, "/tmp", 1);
  EXPECT_TRUE(r.failures.empty());
  EXPECT_TRUE(r.notes.empty());
  r = node_checks::check_node(cfg, job({"0"}), true, "/nonexistent-dir", 1);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_EQ(r.notes[0].rfind("GPUs not checked: ", 0), 0u) << r.notes[0];
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_NE(r.failures[0].find("TMPDIR /nonexistent-dir: cannot read its free space"),
            std::string::npos);
}

TEST(PreflightLinks, AFarSlowerLinkIsNamed) {
  EXPECT_TRUE(slow_links({}).empty());
  EXPECT_TRUE(slow_links({{"n1", 10}}).empty()) << "one link has nothing to be slower than";
  EXPECT_TRUE(slow_links({{"n1", 1000}, {"n2", 900}, {"n3", 300}}).empty()) << "300 > 900/4";
  auto s = slow_links({{"n1", 1000}, {"n2", 950}, {"n3", 200}, {"n4", 1100}});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0],
            "node n3: its link to rank 0's node is far slower than the others: 200 MB/s, under "
            "0.25 of the median 975 MB/s");
  EXPECT_EQ(slow_links({{"a", 100}, {"b", 1000}}).size(), 1u);  // median 550: 100 < 137.5
}

TEST(PreflightOptions, ModeAndSize) {
  EXPECT_EQ(parse_preflight_mode("off"), PreflightMode::off);
  EXPECT_EQ(parse_preflight_mode("warn"), PreflightMode::warn);
  EXPECT_EQ(parse_preflight_mode("fail"), PreflightMode::fail);
  EXPECT_FALSE(parse_preflight_mode("on").has_value());
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("1024"), 1024u);
  EXPECT_EQ(parse_size("1G"), 1ull << 30);
  EXPECT_EQ(parse_size("512M"), 512ull << 20);
  EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_size("100K"), 100ull << 10);
  EXPECT_EQ(parse_size("1T"), 1ull << 40);
  for (const char* bad : {"", "G", "1X", "-1", "1.5G", "1 G", "99999999999999T"})
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
}

TEST(PreflightBandwidth, EchoOverLoopbackGivesAFigure) {
  node_checks::BandwidthServer server;
  ASSERT_GT(server.port(), 0);
  double a = node_checks::measure_bandwidth("127.0.0.1", server.port(), 1 << 20, 10);
  double b = node_checks::measure_bandwidth("127.0.0.1", server.port(), 3 << 20, 10);
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 0);
}

TEST(PreflightBandwidth, NoServerIsAnError) {
  int port = 0;
  {
    node_checks::BandwidthServer gone;
    port = gone.port();
  }
  EXPECT_THROW(node_checks::measure_bandwidth("127.0.0.1", port, 1 << 20, 1), common::Error);
}

}  // namespace
}  // namespace gpurun::launcher

// End-to-end: MIG devices scheduled as GPUs (issue 30, item 2), with a real daemon on the
// nvidia-smi-mig fixture (tests/launcher/fixtures/nvidia-smi: GPU 0 in MIG mode with a 3g.40gb,
// a 2g.20gb and a 1g.10gb device, GPU 1 whole). The daemon finds the devices itself; a job that
// asks for --gres=gpu:1g.10gb:1 gets the 1g.10gb device by its MIG- UUID, a plain gpu:1 job the
// whole GPU, and both survive a daemon kill -9 on the same devices.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <thread>

#include "harness.h"

using namespace gpuq_test;

namespace {
const char* kMig2 = "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c03";  // GPU 0's device 2, 1g.10gb

struct MigGpus {  // what every daemon of the test (the first and the restarted one) samples
  MigGpus() {
    setenv("GPURUN_NVIDIA_SMI",
           (std::string(GPURUN_FIXTURES) + "/nvidia-smi/nvidia-smi-mig").c_str(), 1);
  }
  ~MigGpus() { unsetenv("GPURUN_NVIDIA_SMI"); }
};
}  // namespace

TEST(GpuqMig, AMigDeviceIsScheduledByItsUuidAndItsProfile) {
  MigGpus fixture;
  Daemon d({"--sample-interval", "1"}, "auto");
  EXPECT_NE(d.log().find("4 GPUs [1000,1001,1002,1]"), std::string::npos) << d.log();
  d.script("job.sh",
           "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES $GPUQ_GPUS\" >> seen.$SLURM_JOB_ID\n"
           "while [ ! -e go ]; do sleep 0.1; done\n");
  int64_t small = d.submit("--gres=gpu:1g.10gb:1 job.sh");
  int64_t plain = d.submit("--gres=gpu:1 job.sh");
  EXPECT_EQ(d.wait_state(small, "RUNNING", 20)["gpus"], nlohmann::json::array({1002}));
  EXPECT_EQ(d.wait_state(plain, "RUNNING", 20)["gpus"], nlohmann::json::array({1}))
      << "a job without a profile gets a whole GPU first";
  int64_t second = d.submit("--gres=gpu:1g.10gb:1 job.sh");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(d.show(second)["state"], "PENDING") << "the pool's one 1g.10gb device is taken";

  d.kill9();
  d.start();
  EXPECT_EQ(d.show(small)["gpus"], nlohmann::json::array({1002}));
  EXPECT_EQ(d.show(small)["state"], "RUNNING");
  auto status = d.request(R"({"op":"status"})");
  nlohmann::json device;
  for (const auto& g : status["gpus"])
    if (g["id"] == 1002) device = g;
  EXPECT_EQ(device["name"], "1g.10gb");
  EXPECT_EQ(device["mig"]["gpu"], 0);
  EXPECT_EQ(device["mig"]["device"], 2);
  EXPECT_EQ(device["mig"]["uuid"], kMig2);
  EXPECT_EQ(device["state"], "busy");

  std::ofstream(d.dir() + "/go").flush();
  for (int64_t id : {small, plain, second}) EXPECT_EQ(d.wait_final(id, 30)["state"], "COMPLETED");
  EXPECT_EQ(read_text(fmt::format("{}/seen.{}", d.dir(), small)), fmt::format("{} 1002\n", kMig2));
  EXPECT_EQ(read_text(fmt::format("{}/seen.{}", d.dir(), plain)), "1 1\n");
  EXPECT_EQ(read_text(fmt::format("{}/seen.{}", d.dir(), second)), fmt::format("{} 1002\n", kMig2));

  const std::string job = d.script("one.sh", "#!/bin/sh\ntrue\n");
  Result r = d.gpuq("submit --gres=gpu:2g.20gb:2 " + job);
  EXPECT_NE(r.err.find("this gpuq pool has 1 MIG device(s) of profile 2g.20gb"), std::string::npos)
      << r.err;
}

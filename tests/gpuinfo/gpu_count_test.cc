// gpu_count_test.cc: the one GPU count (gpu_count.h): NVML, then nvidia-smi (here the fixture
// scripts that GPURUN_NVIDIA_SMI names in the end-to-end tests), then the driver's /proc folders.
#include "gpurun/gpuinfo/gpu_count.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace gpuinfo = gpurun::gpuinfo;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) {
  return std::string(GPURUN_FIXTURES) + "/nvidia-smi/" + name;
}

// A /proc with the NVIDIA driver's one folder per GPU, named by PCI address.
class FakeProc : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("gpu_count_test." + std::to_string(getpid()));
    fs::create_directories(root_ / "driver/nvidia/gpus/0000:3b:00.0");
    fs::create_directories(root_ / "driver/nvidia/gpus/0000:af:00.0");
    fs::create_directories(root_ / "empty");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

}  // namespace

TEST_F(FakeProc, NvidiaSmiAnswersFirst) {
  gpuinfo::GpuCount c = gpuinfo::count_gpus({fixture("nvidia-smi-4gpu")}, root_.string());
  EXPECT_EQ(c.ids, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(c.source, "nvidia-smi");
}

TEST_F(FakeProc, MigDevicesArePartsOfTheirGpu) {
  gpuinfo::GpuCount c = gpuinfo::count_gpus({fixture("nvidia-smi-mig")}, root_.string());
  EXPECT_EQ(c.ids, (std::vector<int>{0, 1}));  // GPU 0's three MIG devices are not GPUs
}

TEST_F(FakeProc, TheDriversFoldersWhenNoToolAnswers) {
  gpuinfo::GpuCount c = gpuinfo::count_gpus({root_.string() + "/no-such-nvidia-smi"},
                                            root_.string());
  EXPECT_EQ(c.ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.source, root_.string() + "/driver/nvidia/gpus");
}

TEST_F(FakeProc, NoneFoundSaysWhatEachReaderSaid) {
  gpuinfo::GpuCount c = gpuinfo::count_gpus({fixture("nvidia-smi-broken")},
                                            (root_ / "empty").string());
  EXPECT_TRUE(c.ids.empty());
  EXPECT_EQ(c.source, "");
  EXPECT_NE(c.why_none.find("nvidia-smi-broken"), std::string::npos) << c.why_none;
  EXPECT_NE(c.why_none.find((root_ / "empty").string() + "/driver/nvidia/gpus lists none"),
            std::string::npos)
      << c.why_none;
}

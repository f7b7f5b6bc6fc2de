// checkpoint_test.cc: the temp files of checkpoint writes name their writer (boot id, pid, start
// time), and prepare_checkpoint_dir removes exactly those whose writer is certainly dead: a pid
// that is gone, or one the kernel reused for another process; never a live writer's file, one
// of another boot or machine, one it cannot parse, or anything else in the directory.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include "gpurun/common/posix.h"

namespace gpurun::runtime {
namespace {

namespace cm = gpurun::common;

class CheckpointTempTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpurun-ckpt-tmp-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  // DIR/checkpoint.bin.tmp.OWNER
  std::string temp(const std::string& owner) {
    const std::string p = dir_ + "/checkpoint.bin.tmp." + owner;
    std::ofstream(p) << "half a checkpoint";
    return p;
  }
  static bool exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }
  static std::string owner(long pid, std::uint64_t start) {
    return cm::boot_id() + "." + std::to_string(pid) + "." + std::to_string(start);
  }
  std::string dir_;
};

TEST_F(CheckpointTempTest, RemovesOnlyTheFilesOfDeadWriters) {
  ASSERT_FALSE(cm::boot_id().empty());
  const long me = long(::getpid());
  const auto my_start = cm::process_start_time(me);
  ASSERT_TRUE(my_start);
  // A writer that has exited: its start time read while it is a zombie, then reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  std::optional<std::uint64_t> child_start;
  for (int i = 0; i < 1000 && !(child_start = cm::process_start_time(child)); ++i) ::usleep(1000);
  ASSERT_TRUE(child_start);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);

  const std::string live = temp(owner(me, *my_start));
  const std::string reused = temp(owner(me, *my_start + 1));  // this pid, another process
  const std::string dead = temp(owner(child, *child_start));
  const std::string other_boot = temp("00000000-0000-0000-0000-000000000000." + std::to_string(me) +
                                      "." + std::to_string(*my_start + 1));
  const std::string legacy = temp(std::to_string(child));  // a bare pid: cannot be judged
  const std::string garbage = temp(cm::boot_id() + ".x.y");
  const std::string ckpt = dir_ + "/checkpoint.bin";
  std::ofstream(ckpt) << "a checkpoint";

  EXPECT_EQ(prepare_checkpoint_dir(dir_), 2);
  EXPECT_TRUE(exists(live)) << "a live writer's temp file was removed";
  EXPECT_FALSE(exists(reused)) << "the pid was reused: its writer is dead";
  EXPECT_FALSE(exists(dead));
  EXPECT_TRUE(exists(other_boot));
  EXPECT_TRUE(exists(legacy));
  EXPECT_TRUE(exists(garbage));
  EXPECT_TRUE(exists(ckpt));
  EXPECT_EQ(prepare_checkpoint_dir(dir_), 0);
}

// The temp name save_checkpoint uses is the one prepare_checkpoint_dir judges: seen in the error
// of a rename that fails (checkpoint.bin is a non-empty directory here).
TEST_F(CheckpointTempTest, SaveNamesItsTempFileByBootPidAndStartTime) {
  ASSERT_EQ(::mkdir((dir_ + "/checkpoint.bin").c_str(), 0755), 0);
  std::ofstream(dir_ + "/checkpoint.bin/x") << "x";
  Checkpoint c;
  c.params.assign(10, 1.0f);
  try {
    save_checkpoint(dir_, c);
    ADD_FAILURE() << "the rename onto a directory succeeded";
  } catch (const std::runtime_error& e) {
    const long me = long(::getpid());
    const std::string want =
        dir_ + "/checkpoint.bin.tmp." + owner(me, cm::process_start_time(me).value());
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  EXPECT_EQ(prepare_checkpoint_dir(dir_), 0);  // the failed write removed its own temp file
}

TEST_F(CheckpointTempTest, UnusableDirectoryIsNamed) {
  std::ofstream(dir_ + "/file") << "x";
  try {
    prepare_checkpoint_dir(dir_ + "/file/ckpt");
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "/file/ckpt"), std::string::npos) << e.what();
  }
}

// A checkpoint of 4 ranks x 8 resumed by 2 ranks x 8 (gpurun --nnodes left a node out): the
// position carries over in samples (step 10 of 4x8 is sample 320, step 20 of 2x8), so the shuffle
// of (seed, epoch) goes on where it stopped; a position past the new epoch's end starts the next.
TEST(CheckpointRescale, PositionCarriesOverInSamples) {
  Checkpoint c;
  c.world_size = 4;
  c.batch_per_rank = 8;
  c.epoch = 1;
  c.step = 10;
  c.global_step = 110;
  c.epoch_seen = 320;
  ASSERT_TRUE(rescale_position(c, 2, 8, 200));
  EXPECT_EQ(c.epoch, 1);
  EXPECT_EQ(c.step, 20);
  EXPECT_EQ(c.global_step, 220);
  EXPECT_EQ(c.epoch_seen, 320) << "sums are in samples already";
  EXPECT_EQ(c.world_size, 2);
  EXPECT_FALSE(rescale_position(c, 2, 8, 200)) << "the same shape: nothing changes";

  Checkpoint up;  // 1 rank x 8 at step 3 resumed by 2 x 8: rounded down to step 1 (sample 16)
  up.world_size = 1;
  up.batch_per_rank = 8;
  up.step = 3;
  ASSERT_TRUE(rescale_position(up, 2, 8, 100));
  EXPECT_EQ(up.step, 1);

  Checkpoint end;  // step 99 of 1x8 is past the end of an epoch of 2x8 with 49 steps
  end.world_size = 1;
  end.batch_per_rank = 8;
  end.step = 99;
  end.epoch_seen = 792;
  ASSERT_TRUE(rescale_position(end, 2, 8, 49));
  EXPECT_EQ(end.epoch, 1);
  EXPECT_EQ(end.step, 0);
  EXPECT_EQ(end.epoch_seen, 0);
}

}  // namespace
}  // namespace gpurun::runtime

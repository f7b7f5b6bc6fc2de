// atomic_file_test.cc: common::write_file_atomic gives a reader the old content or the new, never
// a part, also with several writers of one path at once (a fixed "PATH.tmp" name, as gpuq's job
// files had, lets two writers truncate each other's temp file); a failed write leaves the old file
// and no temp file; the mode is the one asked for. remove_dead_temp_files removes only the temp
// files of dead writers, counted suffix or not. And the string helpers split and fnv1a.
#include "gpurun/common/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpurun/common/posix.h"
#include "gpurun/common/strings.h"

namespace gpurun::common {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpurun-atomic-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  // How many entries the folder holds besides . and ..
  int entries() const { return std::stoi(read_command("ls -A '" + dir_ + "' | wc -l")); }
  static std::string read_command(const std::string& cmd) {
    std::string out;
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[256];
      while (std::fgets(buf, sizeof buf, f)) out += buf;
      ::pclose(f);
    }
    return out;
  }
  std::string dir_;
};

TEST_F(AtomicFileTest, WritesTheContentWithTheModeAskedFor) {
  const std::string p = dir_ + "/spec";
  const mode_t old = ::umask(022);
  write_file_atomic(p, "first", 0600, Durability::kFsync);
  write_file_atomic(p, "second, longer", 0644, Durability::kNoSync);
  ::umask(old);
  EXPECT_EQ(read_file(p).value_or("?"), "second, longer");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(entries(), 1) << "a temp file was left";
}

TEST_F(AtomicFileTest, AFailedWriteLeavesTheOldFileAndNoTempFile) {
  // The target is a non-empty folder: the rename fails after the temp file was written.
  const std::string p = dir_ + "/status";
  ASSERT_EQ(::mkdir(p.c_str(), 0755), 0);
  std::ofstream(p + "/keep") << "x";
  try {
    write_file_atomic(p, "new", 0600, Durability::kNoSync);
    ADD_FAILURE() << "renaming over a non-empty folder succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(p + ": ", 0), 0u)
        << "the error names the path: " << e.what();
  }
  EXPECT_EQ(entries(), 1) << "the temp file was left behind";
  EXPECT_EQ(read_file(p + "/keep").value_or("?"), "x");
  EXPECT_THROW(write_file_atomic(dir_ + "/no/such/folder/f", "x", 0600, Durability::kNoSync),
               std::runtime_error);
}

TEST_F(AtomicFileTest, ConcurrentWritersNeverShowAReaderAPart) {
  const std::string p = dir_ + "/status";
  // Each writer's content is one letter repeated: a torn or mixed file has two letters or a
  // wrong length.
  const std::size_t n = 64 * 1024;
  write_file_atomic(p, std::string(n, 'a'), 0600, Durability::kNoSync);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, failed{0};
  std::vector<std::thread> writers;
  for (char c : {'b', 'c', 'd'})
    writers.emplace_back([&, c] {
      for (int i = 0; i < 150; ++i) {
        try {
          write_file_atomic(p, std::string(n, c), 0600, Durability::kNoSync);
        } catch (const std::exception&) {
          ++failed;
        }
      }
    });
  std::thread reader([&] {
    while (!stop) {
      const std::string s = read_file(p).value_or("");
      if (s.size() != n || s.find_first_not_of(s[0]) != std::string::npos) ++bad;
    }
  });
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0) << "a reader saw a partial or mixed file";
  EXPECT_EQ(failed.load(), 0) << "writers of one path collided";
  EXPECT_EQ(entries(), 1) << "temp files were left behind";
}

TEST_F(AtomicFileTest, OnlyDeadWritersTempFilesAreRemoved) {
  const std::string p = dir_ + "/checkpoint.bin";
  const std::string boot = boot_id();
  ASSERT_FALSE(boot.empty());
  const long me = long(::getpid());
  const std::string live =
      std::to_string(me) + "." + std::to_string(process_start_time(me).value());
  // A child that has exited: its pid is free (or, if reused, by a process that started later).
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  std::uint64_t child_start = 0;
  if (auto s = process_start_time(child)) child_start = *s;
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string dead = std::to_string(child) + "." + std::to_string(child_start);
  auto make = [&](const std::string& suffix) {
    std::ofstream(p + ".tmp." + suffix) << "part";
    return p + ".tmp." + suffix;
  };
  const std::string dead1 = make(boot + "." + dead), dead2 = make(boot + "." + dead + ".7");
  const std::string mine = make(boot + "." + live + ".3");
  const std::string other_boot = make("00000000-0000-0000-0000-000000000000." + dead);
  const std::string odd = make(boot + ".x.y");
  std::ofstream(p) << "the checkpoint";
  EXPECT_EQ(remove_dead_temp_files(p), 2);
  for (const auto& f : {dead1, dead2}) EXPECT_NE(::access(f.c_str(), F_OK), 0) << f;
  for (const auto& f : {mine, other_boot, odd, p}) EXPECT_EQ(::access(f.c_str(), F_OK), 0) << f;
}

TEST(Strings, SplitKeepsEveryField) {
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(split("0-3:4-7:", ':'), (std::vector<std::string>{"0-3", "4-7", ""}));
}

// FNV-1a with the project's offset basis (strings.h): values computed independently in Python.
TEST(Strings, Fnv1aKeepsTheCheckpointsConstant) {
  EXPECT_EQ(fnv1a(""), 1469598103934665603ull);
  EXPECT_EQ(fnv1a("foobar"), 0x88fad7c0a8ff07f2ull);
  const unsigned char bytes[] = {0x00, 0xff, 0x80};
  EXPECT_EQ(fnv1a(bytes, sizeof bytes), 0xa897734f39ffead6ull);
}

}  // namespace
}  // namespace gpurun::common

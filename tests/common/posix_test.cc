// Pins the shared POSIX helpers: signal names both ways, whole writes to pipes and sockets (and
// the failure when the reader is gone), whole-file reads, folder listings, the owning
// descriptor, a process's start time (whatever its name) and the boot id.
#include "gpurun/common/posix.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

namespace gpurun::common {
namespace {

TEST(SignalName, NamesKnownSignalsAndNumbersTheRest) {
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(40), "SIG40");
}

TEST(ParseSignal, AcceptsNamesWithOrWithoutSigAndNumbers) {
  EXPECT_EQ(parse_signal("USR1"), SIGUSR1);
  EXPECT_EQ(parse_signal("usr2"), SIGUSR2);
  EXPECT_EQ(parse_signal("SIGTERM"), SIGTERM);
  EXPECT_EQ(parse_signal("sigint"), SIGINT);
  EXPECT_EQ(parse_signal("9"), 9);
  EXPECT_EQ(parse_signal("64"), 64);
}

TEST(ParseSignal, RefusesWhatIsNoSignal) {
  for (const char* bad : {"", "0", "65", "100", "NOPE", "SIG", "USR1x", "-9", " 9"}) {
    EXPECT_FALSE(parse_signal(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(ParseSignal, RoundTripsEveryNamedSignal) {
  for (int s = 1; s < 32; ++s) {
    const std::string name = signal_name(s);
    if (name == "SIG" + std::to_string(s)) continue;
    EXPECT_EQ(parse_signal(name), s) << name;
  }
}

TEST(WriteAll, WritesEverythingThroughAPipe) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Fd r(p[0]), w(p[1]);
  const std::string data(60000, 'x');  // less than the pipe's 64 KiB: no reader needed
  ASSERT_TRUE(write_all(w.get(), data));
  w.reset();
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(r.get(), buf, sizeof buf)) > 0) got.append(buf, std::size_t(n));
  EXPECT_EQ(got, data);
}

TEST(WriteAll, FailsWithoutSigpipeWhenTheSocketPeerIsGone) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]);
  ::close(sv[1]);
  // A SIGPIPE would kill this test process; write_all must report the failure instead.
  EXPECT_FALSE(write_all(a.get(), "hello"));
  EXPECT_EQ(errno, EPIPE);
}

TEST(ReadFile, ReadsWholeFilesAndSaysWhenMissing) {
  char path[] = "/tmp/gpurun-posix-XXXXXX";
  Fd f(::mkstemp(path));
  ASSERT_TRUE(f);
  std::string data = "line 1\nline 2\n";
  data.push_back('\0');
  data += "after a NUL";
  ASSERT_TRUE(write_all(f.get(), data));
  EXPECT_EQ(read_file(path), data);
  ::unlink(path);
  EXPECT_FALSE(read_file(path).has_value());
}

TEST(ListDir, NamesEveryEntryButTheDotsAndSaysWhenMissing) {
  char dir[] = "/tmp/gpurun-listdir-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string d = dir;
  for (const char* name : {"a", ".hidden", "with space"}) {
    Fd f(::open((d + "/" + name).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
    ASSERT_TRUE(f);
  }
  ASSERT_EQ(::mkdir((d + "/sub").c_str(), 0700), 0);
  auto names = list_dir(d);
  ASSERT_TRUE(names.has_value());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{".hidden", "a", "sub", "with space"}));
  for (const char* name : {"a", ".hidden", "with space"}) ::unlink((d + "/" + name).c_str());
  ::rmdir((d + "/sub").c_str());
  EXPECT_EQ(list_dir(d), std::vector<std::string>{});
  ::rmdir(dir);
  errno = 0;
  EXPECT_FALSE(list_dir(d).has_value());
  EXPECT_EQ(errno, ENOENT);
}

TEST(Fd, ClosesOnDestructionAndMovesOwnership) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const int raw = p[0];
  {
    Fd a(p[0]);
    Fd b(std::move(a));
    EXPECT_FALSE(a);
    EXPECT_EQ(b.get(), raw);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);  // closed once, by b
  ::close(p[1]);
}

TEST(Hostname, IsNeverEmpty) {
  EXPECT_FALSE(hostname().empty());
}

// The start time names one process: it does not change when the process renames itself, even to
// a name with blanks and parentheses that a naive split of /proc/PID/stat would miscount; it is
// gone once the process is reaped.
TEST(ProcessStartTime, SurvivesAwkwardNamesAndEndsWithTheProcess) {
  int go[2], done[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    ::prctl(PR_SET_NAME, "x) 1 2 (y", 0, 0, 0);
    if (::write(done[1], "r", 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  const auto before = process_start_time(child);
  ASSERT_TRUE(before);
  EXPECT_TRUE(write_all(go[1], "g"));
  char c;
  ASSERT_EQ(::read(done[0], &c, 1), 1);
  EXPECT_EQ(process_start_time(child), before);
  EXPECT_GE(*before, process_start_time(::getpid()).value());  // started after this process
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(process_start_time(child));
  EXPECT_FALSE(process_start_time(0));
  EXPECT_FALSE(process_start_time(-1));
  for (int fd : {go[0], go[1], done[0], done[1]}) ::close(fd);
}

TEST(BootId, IsTheKernelsOne) {
  const auto id = read_file("/proc/sys/kernel/random/boot_id");
  ASSERT_TRUE(id);
  EXPECT_EQ(boot_id() + "\n", *id);
  EXPECT_EQ(boot_id().size(), 36u);
}

}  // namespace
}  // namespace gpurun::common

TEST(PasswdEntry, FindsAUserByUidAndByNameAndNothingElse) {
  const auto root = gpurun::common::passwd_entry(0u);
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->name, "root");
  EXPECT_EQ(root->gid, 0u);
  const auto by_name = gpurun::common::passwd_entry(std::string("root"));
  ASSERT_TRUE(by_name.has_value());
  EXPECT_EQ(by_name->uid, 0u);
  EXPECT_FALSE(gpurun::common::passwd_entry(4000000000u).has_value());
  EXPECT_FALSE(gpurun::common::passwd_entry(std::string("no-such-user-gpurun")).has_value());
  EXPECT_FALSE(gpurun::common::passwd_entry(std::string("")).has_value());
}

// proc_test.cc: the launcher's owning process plumbing (launcher/src/sys/proc_util.h): a child whose
// owner goes is killed with its whole process group, an exec failure is an error naming the
// program, temp files vanish with their owner, lines are cut right, deadlines fire in order.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>

#include "sys/proc_util.h"

namespace gpurun::launcher::proc {
namespace {

Env path_env() {
  return {{"PATH", "/usr/bin:/bin"}};
}

// A live (non-zombie) process in group `pgid`: zombies answer kill(0) too, and where PID 1 does
// not reap, a killed orphan stays one.
bool group_alive(pid_t pgid) {
  DIR* d = opendir("/proc");
  bool alive = false;
  while (dirent* e = d ? readdir(d) : nullptr) {
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (sscanf(stat.c_str() + close + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3 &&
        pgrp == pgid && state != 'Z' && state != 'X')
      alive = true;
  }
  if (d) closedir(d);
  return alive;
}

TEST(Child, DestructorKillsTheWholeProcessGroup) {
  pid_t pgid;
  {
    Child c = Child::spawn({"sh", "-c", "sleep 100 & exec sleep 100"}, path_env());
    pgid = c.pid();
    ASSERT_TRUE(c.running());
    ASSERT_TRUE(group_alive(pgid));
  }
  // The background sleep was reparented; give the kernel a moment to deliver the SIGKILL.
  for (int i = 0; i < 100 && group_alive(pgid); ++i) usleep(10000);
  EXPECT_FALSE(group_alive(pgid)) << "a process of the child's group outlived its owner";
}

TEST(Child, ExitStatusIsReaped) {
  Child c = Child::spawn({"sh", "-c", "exit 3"}, path_env());
  EXPECT_EQ(exit_code(c.wait()), 3);
  EXPECT_FALSE(c.running());
  Child k = Child::spawn({"sh", "-c", "kill -9 $$"}, path_env());
  EXPECT_EQ(exit_code(k.wait()), 137);
}

TEST(Child, ExecFailureNamesTheProgram) {
  try {
    Child::spawn({"no-such-program-xyz"}, path_env());
    FAIL() << "spawn of a missing program returned";
  } catch (const ExecError& e) {
    EXPECT_EQ(e.err, ENOENT);
    EXPECT_NE(std::string(e.what()).find("cannot run 'no-such-program-xyz'"), std::string::npos);
  }
  TempFile f = TempFile::create("gpurun-test-noexec-", "#!/bin/sh\n", "a test script");
  try {
    Child::spawn({f.path()}, path_env());
    FAIL() << "spawn of a non-executable file returned";
  } catch (const ExecError& e) {
    EXPECT_EQ(e.err, EACCES);
  }
}

TEST(Child, SearchesThePathOfTheProgramsEnvironment) {
  EXPECT_EQ(exit_code(Child::spawn({"true"}, path_env()).wait()), 0);
  EXPECT_THROW(Child::spawn({"true"}, {{"PATH", "/nonexistent"}}), ExecError);
  auto c = program_candidates("prog", {{"PATH", "/a::/b"}});
  EXPECT_EQ(c, (std::vector<std::string>{"/a/prog", "./prog", "/b/prog"}));
  EXPECT_EQ(program_candidates("./x/prog", {}), (std::vector<std::string>{"./x/prog"}));
}

TEST(TempFile, RemovedWithItsOwner) {
  std::string path;
  {
    TempFile f = TempFile::create("gpurun-test-", "hello\n", "a test file");
    path = f.path();
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "hello");
    TempFile moved = std::move(f);
    EXPECT_EQ(moved.path(), path);
    EXPECT_TRUE(f.path().empty());
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " outlived its owner";
}

TEST(LineReader, CutsLinesAndKeepsThePartialOne) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_NONBLOCK), 0);
  common::Fd rd(p[0]), wr(p[1]);
  LineReader r(16);
  std::vector<std::string> lines;
  ASSERT_TRUE(common::write_all(wr.get(), "one\ntwo\nthr"));
  EXPECT_EQ(r.read_from(rd.get(), lines), LineReader::State::open);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(r.pending(), "thr");
  EXPECT_EQ(r.read_from(rd.get(), lines), LineReader::State::open) << "nothing to read is open";
  ASSERT_TRUE(common::write_all(wr.get(), "ee\n0123456789abcdefg"));
  EXPECT_EQ(r.read_from(rd.get(), lines), LineReader::State::overlong);
  EXPECT_EQ(lines.back(), "three");
  wr.reset();
  LineReader r2;
  EXPECT_EQ(r2.read_from(rd.get(), lines), LineReader::State::closed);
}

TEST(Deadlines, EarliestBoundsTheWaitAndDueOnesFireOnce) {
  Deadlines<int> d;
  EXPECT_EQ(d.wait_ms(100.0, 1000), 1000);
  d.set(1, 100.5);
  d.set(2, 100.2);
  EXPECT_NEAR(d.wait_ms(100.0, 1000), 201, 1);
  EXPECT_EQ(d.take_due(100.3), std::vector<int>{2});
  EXPECT_TRUE(d.take_due(100.3).empty());
  EXPECT_TRUE(d.armed(1));
  d.clear(1);
  EXPECT_FALSE(d.armed(1));
}

TEST(SignalPipe, TurnsSignalsIntoBytesAndRestoresTheDefault) {
  {
    SignalPipe p({SIGUSR2});
    raise(SIGUSR2);
    EXPECT_EQ(p.drain(), std::vector<int>{SIGUSR2});
    EXPECT_TRUE(p.drain().empty());
  }
  struct sigaction sa {};
  sigaction(SIGUSR2, nullptr, &sa);
  EXPECT_EQ(sa.sa_handler, SIG_DFL);
}

}  // namespace
}  // namespace gpurun::launcher::proc

// stacks_test.cc: where a hung rank is, read from real eu-stack, gdb and faulthandler output
// (tests/launcher/data/stacks), and the one-line summary that groups ranks by it
// (launcher/src/stacks/stacks.h); collect_stacks on a live process group.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "gpurun/common/posix.h"
#include "sys/proc_util.h"
#include "stacks/stacks.h"
#include "test_support.h"

namespace gpurun::launcher::stacks {
namespace {

std::string fixture(const std::string& name) {
  auto text = common::read_file(fixtures::data("stacks/" + name));
  EXPECT_TRUE(text.has_value()) << name;
  return text.value_or("");
}

TEST(StacksWhere, MpiCallFromEitherTool) {
  EXPECT_EQ(where(fixture("mpi-allreduce.eu-stack.txt")), "MPI_Allreduce");
  EXPECT_EQ(where(fixture("mpi-allreduce.gdb.txt")), "MPI_Allreduce");
}

TEST(StacksWhere, InnermostNamedFrameSkipsGlibcHelpers) {
  EXPECT_EQ(where(fixture("mpi-stopped.eu-stack.txt")), "raise");
  EXPECT_EQ(where(fixture("mpi-stopped.gdb.txt")), "raise");
  EXPECT_EQ(where(fixture("sleep.eu-stack.txt")), "clock_nanosleep");
  EXPECT_EQ(where(fixture("sleep.gdb.txt")), "clock_nanosleep");
}

TEST(StacksWhere, PythonMainThreadFrame) {
  std::string text = "=== process 7 (python3) ===\n" + fixture("sleep.eu-stack.txt") +
                     "=== python tracebacks of process 7 ===\n" +
                     fixture("python.faulthandler.txt");
  EXPECT_EQ(where(text), "h.py:7 in step");
}

// Issue 25, item 2: a rank waiting inside a library (torch's autograd in a venv's site-packages)
// is named by the user's frame that called it; a program all in the standard library or in
// packages falls back to its innermost frame, as before.
TEST(StacksWhere, PythonNamesTheUsersFrameNotTheLibrarys) {
  std::string text = "=== process 7 (python3) ===\n" + fixture("sleep.eu-stack.txt") +
                     "=== python tracebacks of process 7 ===\n" +
                     fixture("python-site-packages.faulthandler.txt");
  EXPECT_EQ(where(text), "train.py:9 in step");
  const std::string libs =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/socketserver.py\", line 233 in serve_forever\n"
      "  File \"/usr/lib/python3/dist-packages/x/serve.py\", line 5 in run\n"
      "  File \"<frozen runpy>\", line 88 in _run_code\n"
      "  File \"/opt/conda/lib/python3.10/site-packages/y.py\", line 3 in <module>\n";
  EXPECT_EQ(where("=== python tracebacks of process 8 ===\n" + libs),
            "socketserver.py:233 in serve_forever");
  const std::string dash_c =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 331 in wait\n"
      "  File \"<string>\", line 1 in <module>\n";
  EXPECT_EQ(where("=== python tracebacks of process 9 ===\n" + dash_c), "<string>:1 in <module>");
}

TEST(StacksWhere, AShellWaitingForItsChildIsPassedOver) {
  std::string shell = "PID 10 - process\nTID 10:\n#0  0x1 wait4\n#1  0x2 main\n";
  std::string text = "=== process 10 (sh) ===\n" + shell + "=== process 11 (prog) ===\n" +
                     fixture("sleep.eu-stack.txt");
  EXPECT_EQ(where(text), "clock_nanosleep");
  EXPECT_EQ(where("=== process 10 (sh) ===\n" + shell), "wait4");
  EXPECT_EQ(where("nothing useful"), "unknown");
}

TEST(StacksSummary, GroupsRanksByPlaceAndSaysWhoIsBehind) {
  EXPECT_EQ(hang_summary({{0, "MPI_Allreduce", false},
                          {1, "MPI_Allreduce", false},
                          {2, "raise", true},
                          {3, "MPI_Allreduce", false}}),
            "ranks 0-1,3 in MPI_Allreduce; rank 2 in raise: it is behind");
  EXPECT_EQ(hang_summary({{0, "x", true}, {1, "x", true}, {2, "x", false}}),
            "ranks 0-1 in x: they are behind; rank 2 in x");
  EXPECT_EQ(rank_list({0, 2, 3, 4, 7, 9, 10}), "0,2-4,7,9-10");
  EXPECT_EQ(rank_list({5}), "5");
}

TEST(StacksCollect, EveryProcessOfTheGroupWithTheRealTool) {
  Env env{{"PATH", "/usr/bin:/bin"}};
  proc::Child c = proc::Child::spawn({"sh", "-c", "sleep 60 & sleep 61; wait"}, env);
  // Both sleeps exist once the shell has forked them.
  std::string text;
  for (int i = 0; i < 100; ++i) {
    text = collect_stacks(env, c.pid(), "/nonexistent", 10);
    if (text.find("(sleep)") != std::string::npos &&
        text.find("(sleep)", text.find("(sleep)") + 1) != std::string::npos)
      break;
    usleep(20000);
  }
  EXPECT_EQ(text.find("=== process " + std::to_string(c.pid()) + " (sh)"), 0u) << text;
  EXPECT_NE(text.find("nanosleep"), std::string::npos) << text;
  EXPECT_EQ(where(text), "clock_nanosleep") << text;
}

}  // namespace
}  // namespace gpurun::launcher::stacks

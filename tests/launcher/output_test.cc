// output_test.cc: whole lines from each rank (launcher/src/supervisor/output.h): the wrapper's line cutter
// holds an unfinished line until it ends or waits too long; gpurun's sink tags lines, ends an
// unfinished one on the terminal, and writes each rank's bytes unchanged to its files. Also the
// heartbeat file's contents (wrapper/rank_folder.h).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "gpurun/common/posix.h"
#include "gpurun/common/terminal.h"
#include "gpurun/launcher/launch.h"
#include "wrapper/rank_folder.h"
#include "supervisor/output.h"

namespace gpurun::launcher {
namespace {

TEST(LineForwarder, WholeLinesOnlyUntilAPartialOneWaitsTooLong) {
  LineForwarder f(100);
  EXPECT_EQ(f.take_lines("ab", 1.0), "");
  EXPECT_EQ(f.take_lines("c\nde", 1.1), "abc\n");
  EXPECT_EQ(f.partial_since().value_or(-1), 1.1);
  EXPECT_FALSE(f.take_partial(1.0).has_value()) << "not old enough";
  EXPECT_EQ(f.take_partial(1.2).value_or(""), "de");
  EXPECT_FALSE(f.partial_since().has_value());
  EXPECT_EQ(f.take_lines("x\ny\nz", 2.0), "x\ny\n");
  EXPECT_EQ(f.take_partial_now().value_or(""), "z");
  EXPECT_EQ(f.take_lines(std::string(150, 'q'), 3.0), "");
  EXPECT_EQ(f.take_partial(0).value_or("").size(), 150u) << "an overlong line goes out";
}

TEST(HeartbeatFile, StepAtOffsetZero) {
  EXPECT_EQ(parse_heartbeat("42").value_or(-1), 42);
  EXPECT_EQ(parse_heartbeat("42\n").value_or(-1), 42);
  EXPECT_EQ(parse_heartbeat("17                  \n").value_or(-1), 17);
  EXPECT_EQ(parse_heartbeat("   17\n").value_or(-1), 17);
  for (const char* bad : {"", "\n", "x1", "12a", "-3", "1 2"})
    EXPECT_FALSE(parse_heartbeat(bad).has_value()) << bad;
}

TEST(RankDir, HoldsTheHeartbeatAndGoesWithItsOwner) {
  std::string path;
  {
    RankDir d = RankDir::create("/tmp", 3);
    path = d.heartbeat();
    EXPECT_FALSE(d.read_step().has_value());
    common::Fd fd(::open(path.c_str(), O_WRONLY));
    ASSERT_TRUE(common::write_all(fd.get(), "123     \n"));
    EXPECT_EQ(d.read_step().value_or(-1), 123);
    EXPECT_TRUE(std::filesystem::exists(d.python_dir() + "/sitecustomize.py"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(RankDir, FoldersOfKilledWrappersOnThisHostAreRemoved) {
  char tmpl[] = "/tmp/gpurun-rankdir-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string tmp = tmpl, host = common::hostname();
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  std::string stale = fmt::format("{}/gpurun-{}-p{}-rank1-abcdef", tmp, host, dead);
  std::string live = fmt::format("{}/gpurun-{}-p{}-rank2-abcdef", tmp, host, getpid());
  std::string other = fmt::format("{}/gpurun-otherhost-p{}-rank3-abcdef", tmp, dead);
  for (const auto& d : {stale, live, other}) std::filesystem::create_directories(d + "/python");
  {
    RankDir d = RankDir::create(tmp, 0);
    EXPECT_FALSE(std::filesystem::exists(stale)) << "a dead wrapper's folder stayed";
    EXPECT_TRUE(std::filesystem::exists(live)) << "a live wrapper's folder was removed";
    EXPECT_TRUE(std::filesystem::exists(other))
        << "another host's folder (shared TMPDIR) was removed";
  }
  std::filesystem::remove_all(tmp);
}

TEST(OutputSink, FilesGetTheExactBytes) {
  char tmpl[] = "/tmp/gpurun-output-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = std::string(tmpl) + "/out";
  {
    OutputSink s(true, dir, 2);
    s.write(1, 1, false, "a\nb\n");
    s.write(1, 1, true, "unfinished");
    s.write(0, 2, false, "err\n");
  }
  EXPECT_EQ(common::read_file(dir + "/rank-1.out").value_or("?"), "a\nb\nunfinished");
  EXPECT_EQ(common::read_file(dir + "/rank-0.err").value_or("?"), "err\n");
  EXPECT_EQ(common::read_file(dir + "/rank-0.out").value_or("?"), "") << "made for every rank";
  std::filesystem::remove_all(tmpl);
}

// --max-restarts appends attempts to the same files: each starts on a line of its own.
TEST(OutputSink, AttemptsAreMarked) {
  char tmpl[] = "/tmp/gpurun-output-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = std::string(tmpl) + "/out";
  {
    OutputSink s(false, dir, 1);
    s.mark_attempt(1);
    s.write(0, 1, true, "cut");
    s.mark_attempt(2);
    s.write(0, 1, false, "x\n");
  }
  EXPECT_EQ(common::read_file(dir + "/rank-0.out").value_or("?"),
            "==> attempt 1 <==\ncut\n==> attempt 2 <==\nx\n");
  EXPECT_EQ(common::read_file(dir + "/rank-0.err").value_or("?"),
            "==> attempt 1 <==\n==> attempt 2 <==\n");
  std::filesystem::remove_all(tmpl);
}

// Open MPI's MPI_ABORT frame, as each rank prints it under srun (captured on the local cluster):
// taken out with its rank and code; other frames and lines pass.
TEST(AbortBanners, TakenOutAndNamed) {
  const std::string rule(74, '-');
  const std::string frame =
      rule + "\nMPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD\n" +
      "with errorcode 1.\n\nNOTE: invoking MPI_ABORT causes Open MPI to kill " +
      "all MPI processes.\nYou may or may not see output from other " +
      "processes, depending on\nexactly when Open MPI kills them.\n" + rule + "\n";
  std::vector<AbortBanner> found;
  EXPECT_EQ(take_abort_banners("error: no data\n" + frame + "after\n", found),
            "error: no data\nafter\n");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_EQ(found[0].errorcode, 1);
  // mpirun's gathering of the other ranks' frames goes too; a user's own table stays.
  const std::string table = rule + "\n| epoch | loss |\n" + rule + "\n";
  found.clear();
  EXPECT_EQ(
      take_abort_banners("[vm:06349] 1 more process has sent help message help-mpi-api.txt / "
                         "mpi-abort\n[vm:06349] Set MCA parameter \"orte_base_help_aggregate\" "
                         "to 0 to see all help / error messages\n" +
                             table,
                         found),
      table);
  EXPECT_TRUE(found.empty());
  // An unclosed frame is not taken out.
  EXPECT_EQ(take_abort_banners(frame.substr(0, frame.size() - rule.size() - 1), found).size(),
            frame.size() - rule.size() - 1);
}

// mpirun that failed to relay the frames of ranks aborting at once: its complaint is the frame's.
TEST(AbortBanners, AFailedRelayOfTheFrameGoesToo) {
  std::vector<AbortBanner> found;
  EXPECT_EQ(take_abort_banners("[vm:13471] [[22625,0],0] ORTE_ERROR_LOG: Data unpack would read "
                               "past end of buffer in file ../../../orte/util/show_help.c at line "
                               "513\n[vm:13471] [[22625,0],0] ORTE_ERROR_LOG: Out of resource in "
                               "file ../../../orte/util/show_help.c at line 507\nmine\n",
                               found),
            "mine\n");
  EXPECT_TRUE(found.empty());
  // Other ORTE errors are not the frame's: they stay.
  EXPECT_EQ(take_abort_banners("[vm:1] [[2,0],0] ORTE_ERROR_LOG: Not found in file plm.c at line 9\n",
                               found),
            "[vm:1] [[2,0],0] ORTE_ERROR_LOG: Not found in file plm.c at line 9\n");
}

TEST(AbortBanners, SrunsEchoOfAStepItEnded) {
  EXPECT_TRUE(is_engine_echo("srun: error: node1: tasks 0-1: Killed\n"));
  EXPECT_TRUE(is_engine_echo("srun: error: node2: task 3: Exited with exit code 1\n"));
  EXPECT_TRUE(is_engine_echo(
      "0: slurmstepd-node1: error: *** STEP 13.0 ON node1 CANCELLED AT 2026-11-25T02:39:42 ***\n"));
  EXPECT_TRUE(
      is_engine_echo("srun: Job step aborted: Waiting up to 12 seconds for job step to finish.\n"));
  EXPECT_TRUE(is_engine_echo("srun: launch/slurm: _step_signal: Terminating StepId=13.0\n"));
  EXPECT_FALSE(
      is_engine_echo("srun: error: Unable to create step for job 7: Invalid generic resource\n"));
  EXPECT_FALSE(is_engine_echo("0: epoch 1 loss 0.3\n"));
}

// Issue 26, item 6: names from the environment reach the terminal with control characters
// escaped; readable UTF-8 passes, C1 controls, bidi controls and bytes that are no UTF-8 do not.
TEST(TerminalSafe, EscapesControlCharacters) {
  using common::escape_control;
  EXPECT_EQ(escape_control("node\x1b[31m1\r\n\t"), "node\\e[31m1\\r\\n\\t");
  EXPECT_EQ(escape_control(std::string("a\0b\x7f", 4)), "a\\0b\\x7f");
  EXPECT_EQ(escape_control("n\xc3\xa9ud"), "n\xc3\xa9ud");
  EXPECT_EQ(escape_control("\xc2\x9b"
                           "31m"),
            "\\xc2\\x9b31m");  // C1 CSI
  EXPECT_EQ(escape_control("\xff\xc3"), "\\xff\\xc3");
  // Bidirectional overrides and isolates (a name that shows "job_gnp.sh" and holds
  // "job_<RLO>hs.png"): written \uXXXX. Other characters of two to four bytes pass.
  EXPECT_EQ(escape_control("job_\xe2\x80\xaehs.png"), "job_\\u202ehs.png");
  EXPECT_EQ(escape_control("\xe2\x81\xa6x\xe2\x81\xa9\xd8\x9c\xe2\x80\x8f"),
            "\\u2066x\\u2069\\u061c\\u200f");
  EXPECT_EQ(escape_control("\xe2\x82\xac \xf0\x9f\x98\x80 \xe2\x80\x94"),
            "\xe2\x82\xac \xf0\x9f\x98\x80 \xe2\x80\x94");  // euro, emoji, em dash
  EXPECT_EQ(escape_control(escape_control("a\xe2\x80\xae")), "a\\u202e");
  // Not well-formed (RFC 3629), so written as bytes: an overlong C1 CSI, a surrogate, past
  // U+10FFFF.
  EXPECT_EQ(escape_control("\xe0\x82\x9b"), "\\xe0\\x82\\x9b");
  EXPECT_EQ(escape_control("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(escape_control("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(shell_quote("a\xe2\x80\xae"), "$'a\\u202e'");  // bash reads \u202e back
  EXPECT_EQ(common::escape_control_keep_lines("a\nb\x1b"), "a\nb\\e");
  // A word the dry run prints: still the same word when pasted into bash.
  EXPECT_EQ(shell_quote("it's\x1b"), "$'it\\'s\\e'");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
}

}  // namespace
}  // namespace gpurun::launcher

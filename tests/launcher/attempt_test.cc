// attempt_test.cc: one attempt's bookkeeping (launcher/src/supervisor/attempt.h) without sockets,
// processes or clocks: ranks starting in any order, GO once every rank reached rank 0, the first
// failure is the one kept, a user's stop is no failure, when to restart, and the hang rules with
// the times passed in. The whole supervisor is run end to end by e2e_*.sh.
#include "supervisor/attempt.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>

namespace gpurun::launcher {
namespace {

constexpr double kHangTimeout = 10;
constexpr double kT0 = 100;  // when the tests' attempts start (a `now` is above 0)

// Every rank said HELLO from host h<rank>, reached rank 0 and runs its program since kT0.
Attempt all_running(int world) {
  Attempt a(world, kHangTimeout);
  for (int r = 0; r < world; ++r) EXPECT_TRUE(a.on_hello(r, "h" + std::to_string(r)));
  for (int r = 0; r < world; ++r) a.on_reach(r, "eth0", std::nullopt);
  for (int r = 0; r < world; ++r) a.on_running(r, kT0);
  EXPECT_TRUE(a.all_running());
  return a;
}

Attempt::ProgramEnd exit_code(int code, double seconds = 1.5) {
  return {code, 0, seconds, ""};
}

Attempt::ProgramEnd killed_by(int sig, double seconds = 1.5) {
  return {0, sig, seconds, ""};
}

TEST(Attempt, RanksStartInAnyOrderEachOnce) {
  Attempt a(3, kHangTimeout);
  EXPECT_TRUE(a.on_hello(2, "c"));
  EXPECT_TRUE(a.on_hello(0, "a"));
  EXPECT_EQ(a.started_count(), 2);
  EXPECT_FALSE(a.rank(1).started);
  EXPECT_FALSE(a.on_hello(2, "other")) << "a second HELLO for rank 2";
  EXPECT_EQ(a.rank(2).host, "c");
  EXPECT_FALSE(a.on_hello(3, "d")) << "outside a job of 3 ranks";
  EXPECT_FALSE(a.on_hello(-1, "d"));
  EXPECT_TRUE(a.on_hello(1, "b"));
  EXPECT_EQ(a.started_count(), 3);

  EXPECT_FALSE(a.on_running(1, kT0));
  EXPECT_FALSE(a.on_running(1, kT0 + 1)) << "a repeat is not a second rank";
  EXPECT_EQ(a.rank(1).last_progress, kT0);
  EXPECT_FALSE(a.on_running(2, kT0 + 2));
  EXPECT_EQ(a.running_count(), 2);
  EXPECT_FALSE(a.all_running());
  EXPECT_TRUE(a.on_running(0, kT0 + 3)) << "the last rank's program started";
  EXPECT_TRUE(a.all_running());
}

TEST(Attempt, GoOnceEveryRankReachedRankZero) {
  Attempt a(3, kHangTimeout);
  for (int r : {1, 2, 0}) a.on_hello(r, "h");
  EXPECT_FALSE(a.on_reach(2, "ib0", std::nullopt));
  EXPECT_FALSE(a.on_reach(0, "eth0", "connection refused"));
  EXPECT_FALSE(a.rank(0).reached);
  EXPECT_EQ(a.rank(0).reach_error, "connection refused");
  EXPECT_FALSE(a.on_reach(0, "eth0", std::nullopt));
  EXPECT_TRUE(a.rank(0).reach_error.empty()) << "it reaches it now";
  EXPECT_FALSE(a.on_reach(2, "ib0", std::nullopt)) << "a repeat is not a third rank";
  EXPECT_EQ(a.reached_count(), 2);
  EXPECT_FALSE(a.go_sent());
  EXPECT_TRUE(a.on_reach(1, "eth1", std::nullopt));
  EXPECT_TRUE(a.go_sent());
  EXPECT_EQ(a.rank(1).iface, "eth1");
  EXPECT_FALSE(a.on_reach(1, "eth1", std::nullopt)) << "GO goes out once";
}

// --preflight: GO waits for every node's report as well as every rank's reach, in either order.
TEST(Attempt, PreflightGoWaitsForEveryNodesReport) {
  Attempt a(4, kHangTimeout);
  a.expect_preflight({0, 2}, true);  // two nodes, ranks 0 and 2 their local rank 0
  for (int r = 0; r < 4; ++r) a.on_hello(r, r < 2 ? "n1" : "n2");
  EXPECT_FALSE(a.preflight_done());
  EXPECT_FALSE(a.on_preflight(2, {}));
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(a.on_reach(r, "eth0", std::nullopt)) << r;
  EXPECT_FALSE(a.go_sent()) << "node n1 has not reported";
  EXPECT_FALSE(a.on_preflight(1, {})) << "rank 1 does not check a node";
  EXPECT_FALSE(a.preflight_done());
  EXPECT_TRUE(a.on_preflight(0, {{}, {"GPUs not checked: no nvidia-smi"}, -1}))
      << "a note is no failure";
  EXPECT_TRUE(a.go_sent());
  EXPECT_TRUE(a.preflight_done());
  EXPECT_FALSE(a.preflight_refused());
  EXPECT_FALSE(a.on_preflight(0, {})) << "a repeat changes nothing";
  EXPECT_EQ(a.rank(0).preflight->notes.size(), 1u);
}

TEST(Attempt, PreflightFailureRefusesGoOnlyWhenFailing) {
  for (bool refuse : {true, false}) {
    Attempt a(2, kHangTimeout);
    a.expect_preflight({0, 1}, refuse);
    for (int r = 0; r < 2; ++r) a.on_hello(r, "n" + std::to_string(r));
    for (int r = 0; r < 2; ++r) a.on_reach(r, "eth0", std::nullopt);
    EXPECT_FALSE(a.on_preflight(1, {{"GPU 0 (rank 1): 2 uncorrected ECC errors"}, {}, 900}));
    EXPECT_EQ(a.on_preflight(0, {{}, {}, -1}), !refuse) << refuse;
    EXPECT_EQ(a.preflight_refused(), refuse);
    EXPECT_EQ(a.go_sent(), !refuse);
    EXPECT_DOUBLE_EQ(a.rank(1).preflight->mb_per_s, 900);
  }
}

TEST(Attempt, WithoutPreflightGoNeedsOnlyTheReach) {
  Attempt a(1, kHangTimeout);
  EXPECT_TRUE(a.preflight_done());
  a.on_hello(0, "h");
  EXPECT_FALSE(a.on_preflight(0, {{"x"}, {}, -1})) << "not expected: ignored";
  EXPECT_TRUE(a.on_reach(0, "lo", std::nullopt));
}

TEST(Attempt, NoGoOnceStopping) {
  Attempt a(2, kHangTimeout);
  a.on_hello(0, "a");
  a.on_hello(1, "b");
  a.on_reach(0, "eth0", std::nullopt);
  EXPECT_TRUE(a.fail(0, "exited with code 2", 2, 1));
  EXPECT_TRUE(a.begin_stop());
  EXPECT_FALSE(a.on_reach(1, "eth0", std::nullopt));
  EXPECT_EQ(a.reached_count(), 2);
  EXPECT_FALSE(a.go_sent());
}

TEST(Attempt, FirstFailureWinsLaterOnesDoNotReplaceIt) {
  Attempt a = all_running(3);
  EXPECT_FALSE(a.failure().has_value());
  EXPECT_TRUE(a.on_end(1));
  EXPECT_TRUE(a.fail_by_end(1, exit_code(3, 7.25)));
  ASSERT_TRUE(a.failure().has_value());
  EXPECT_EQ(a.failure()->rank, 1);
  EXPECT_EQ(a.failure()->host, "h1");
  EXPECT_EQ(a.failure()->what, "exited with code 3");
  EXPECT_EQ(a.failure()->status, 3);
  EXPECT_EQ(a.failure()->seconds, 7.25);
  EXPECT_TRUE(a.failure()->all_running);

  // The others die of the stop the first failure began: none of that is recorded.
  EXPECT_TRUE(a.on_end(0));
  EXPECT_FALSE(a.fail_by_end(0, killed_by(SIGKILL)));
  EXPECT_FALSE(a.on_lost(2, 9));
  EXPECT_FALSE(a.fail(-1, "hung", 124, 9));
  EXPECT_EQ(a.failure()->rank, 1);
  EXPECT_EQ(a.failure()->status, 3);
  EXPECT_FALSE(a.on_end(1)) << "rank 1's end was known";
}

TEST(Attempt, HowAProgramsEndBecomesAFailure) {
  Attempt clean = all_running(2);
  EXPECT_FALSE(clean.fail_by_end(0, exit_code(0)));
  EXPECT_FALSE(clean.failure().has_value()) << "exit 0 is no failure";

  Attempt killed = all_running(2);
  EXPECT_TRUE(killed.fail_by_end(1, killed_by(SIGKILL, 3)));
  EXPECT_EQ(killed.failure()->what, "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(killed.failure()->status, 128 + SIGKILL);
  EXPECT_EQ(killed.failure()->seconds, 3);

  // The wrapper's own failure (the program never ran): its words, no running time.
  Attempt wrapper = all_running(2);
  EXPECT_TRUE(wrapper.fail_by_end(0, {127, 0, 0.5, "cannot execute ./train: No such file"}));
  EXPECT_EQ(wrapper.failure()->what, "cannot execute ./train: No such file");
  EXPECT_EQ(wrapper.failure()->status, 127);
  EXPECT_EQ(wrapper.failure()->seconds, -1);
}

TEST(Attempt, FailureBeforeEveryRankRanGivesNoRestart) {
  Attempt a(3, kHangTimeout);
  for (int r = 0; r < 3; ++r) a.on_hello(r, "h" + std::to_string(r));
  a.on_running(0, kT0);
  a.on_running(2, kT0);
  EXPECT_TRUE(a.on_end(2));
  EXPECT_TRUE(a.fail_by_end(2, exit_code(1)));
  EXPECT_FALSE(a.failure()->all_running) << "rank 1's program had not started";
  EXPECT_EQ(a.restart(0, 5, 0), Attempt::Restart::no_failed_before_all_ran);
  // The program starting later does not change what was recorded.
  EXPECT_TRUE(a.on_running(1, kT0 + 1));
  EXPECT_FALSE(a.failure()->all_running);
  EXPECT_EQ(a.restart(0, 5, 0), Attempt::Restart::no_failed_before_all_ran);
}

TEST(Attempt, RestartWhileRestartsAreLeft) {
  Attempt a = all_running(2);
  a.on_end(0);
  a.fail_by_end(0, killed_by(SIGSEGV));
  EXPECT_EQ(a.restart(0, 2, 0), Attempt::Restart::yes);
  EXPECT_EQ(a.restart(1, 2, 0), Attempt::Restart::yes);
  EXPECT_EQ(a.restart(2, 2, 0), Attempt::Restart::no) << "both restarts spent";
  EXPECT_EQ(a.restart(0, 0, 0), Attempt::Restart::no) << "without --max-restarts";
}

TEST(Attempt, NoRestartWithoutARanksFailure) {
  Attempt clean = all_running(2);
  clean.on_end(0);
  clean.on_end(1);
  EXPECT_EQ(clean.restart(0, 3, 0), Attempt::Restart::no) << "every rank exited 0";

  Attempt hung = all_running(2);
  hung.mark_hung("no rank made progress for 10 s");
  hung.begin_stop();
  hung.fail(-1, "hung", 124, 20);
  EXPECT_EQ(hung.restart(0, 3, 0), Attempt::Restart::no);
  EXPECT_EQ(hung.failure()->host, "") << "the job as a whole: no rank's host";

  // A rank's failure after a hang was called (its program killed by the stacks' tools, say).
  Attempt hung_then_rank = all_running(2);
  hung_then_rank.mark_hung("rank 1's step (3) stayed behind the others' (4) for 10 s");
  hung_then_rank.fail_by_end(1, killed_by(SIGABRT));
  EXPECT_EQ(hung_then_rank.restart(0, 3, 0), Attempt::Restart::no);
}

TEST(Attempt, LostWrapperIsAFailure) {
  Attempt a = all_running(3);
  EXPECT_TRUE(a.on_lost(2, 4.5));
  ASSERT_TRUE(a.failure().has_value());
  EXPECT_EQ(a.failure()->rank, 2);
  EXPECT_EQ(a.failure()->host, "h2");
  EXPECT_EQ(a.failure()->status, 137);
  EXPECT_EQ(a.failure()->what, "was lost (its wrapper ended without reporting: killed?)");
  EXPECT_EQ(a.failure()->seconds, 4.5);
  EXPECT_TRUE(a.rank(2).exited);
  EXPECT_EQ(a.restart(0, 1, 0), Attempt::Restart::yes);
}

TEST(Attempt, ConnectionClosingAfterEXITIsNoLoss) {
  Attempt a = all_running(2);
  EXPECT_TRUE(a.on_end(0));
  EXPECT_FALSE(a.fail_by_end(0, exit_code(0)));
  EXPECT_FALSE(a.on_lost(0, 5)) << "its wrapper reported the end, then closed";
  EXPECT_FALSE(a.failure().has_value());
}

TEST(Attempt, UserStopIsNoFailure) {
  Attempt a = all_running(3);
  // gpurun forwarded SIGTERM: ranks that die of it, or exit otherwise, end by the stop.
  EXPECT_TRUE(a.ended_by_user_stop(killed_by(SIGTERM), SIGTERM));
  EXPECT_TRUE(a.ended_by_user_stop(exit_code(1), SIGTERM));
  // Ctrl-C reaches the whole process group, ranks included, before gpurun forwards anything.
  EXPECT_TRUE(a.ended_by_user_stop(killed_by(SIGINT), 0));
  // Without a stop, an exit or another signal is a failure.
  EXPECT_FALSE(a.ended_by_user_stop(exit_code(1), 0));
  EXPECT_FALSE(a.ended_by_user_stop(killed_by(SIGTERM), 0));
  // The wrapper's own failure is never the user's stop.
  EXPECT_FALSE(a.ended_by_user_stop({127, 0, 0, "cannot execute ./x"}, SIGTERM));
  EXPECT_FALSE(a.failure().has_value());
  EXPECT_EQ(a.restart(0, 3, SIGTERM), Attempt::Restart::no);

  // Once a rank failed, later ends follow from that failure, stop or not.
  a.fail_by_end(0, exit_code(2));
  EXPECT_FALSE(a.ended_by_user_stop(killed_by(SIGINT), SIGINT));
  EXPECT_EQ(a.restart(0, 3, SIGINT), Attempt::Restart::no) << "the user also asked to stop";
  EXPECT_EQ(a.restart(0, 3, 0), Attempt::Restart::yes);
}

TEST(Attempt, StopNamesTheRanksStillRunning) {
  Attempt a(4, kHangTimeout);
  for (int r : {0, 1, 3}) a.on_hello(r, "h");  // rank 2's wrapper never connected
  a.on_end(1);
  EXPECT_FALSE(a.stopping());
  EXPECT_TRUE(a.begin_stop());
  EXPECT_TRUE(a.stopping());
  EXPECT_EQ(a.stopped(), (std::vector<int>{0, 3}));
  a.on_end(0);
  EXPECT_FALSE(a.begin_stop()) << "the stop had begun";
  EXPECT_EQ(a.stopped(), (std::vector<int>{0, 3}));
}

// Ranks 0 and 1 step once a second from kT0 + 1; rank 2 steps with them until `stall`, then
// stays on its step until `resume` (if ever), and from then keeps up. find_hang runs every
// second, as the supervisor's check does. Returns the first hang and when it was found.
struct Found {
  std::optional<Attempt::Hang> hang;
  double at = 0;
};
Found run_with_a_stall(Attempt& a, double stall, double resume, double until) {
  for (double t = kT0 + 1; t <= until; t += 1) {
    std::int64_t step = static_cast<std::int64_t>(t - kT0);
    a.on_step(0, step, t);
    a.on_step(1, step, t);
    if (t < stall)
      a.on_step(2, step, t);
    else if (t >= resume)
      a.on_step(2, step, t);
    else
      a.on_step(2, static_cast<std::int64_t>(stall - 1 - kT0), t);  // a repeat of its step
    if (auto h = a.find_hang(t)) return {h, t};
  }
  return {};
}

TEST(Attempt, RankBehindTheHighestStepForTheTimeoutIsNamed) {
  Attempt a = all_running(3);
  Found f = run_with_a_stall(a, kT0 + 5, 1e9, kT0 + 60);
  ASSERT_TRUE(f.hang.has_value()) << "rank 2 never moved again";
  EXPECT_EQ(f.hang->rank, 2);
  EXPECT_EQ(f.hang->step, 4);
  // Behind from kT0 + 5 (when the others moved to step 5): named at the timeout, not before.
  EXPECT_EQ(f.at, kT0 + 5 + kHangTimeout);
  EXPECT_EQ(f.hang->top, static_cast<std::int64_t>(f.at - kT0));
  EXPECT_TRUE(a.unmoved(a.rank(2), a.top_step(), f.at));
  EXPECT_FALSE(a.unmoved(a.rank(0), a.top_step(), f.at));
}

TEST(Attempt, RankThatCatchesUpIsNotNamed) {
  Attempt a = all_running(3);
  Found f = run_with_a_stall(a, kT0 + 5, kT0 + 5 + kHangTimeout - 1, kT0 + 60);
  EXPECT_FALSE(f.hang.has_value()) << "rank 2 caught up a second before the timeout, at " << f.at;
  EXPECT_EQ(a.rank(2).behind_since, 0) << "not behind any more";
}

TEST(Attempt, SlowerRankThatStillAdvancesIsNotStuck) {
  Attempt a = all_running(2);
  for (double t = kT0 + 1; t <= kT0 + 60; t += 1) {
    a.on_step(0, static_cast<std::int64_t>(t - kT0), t);  // one step a second
    // Rank 1: one step every 5 s, ever further behind, but never stuck.
    a.on_step(1, static_cast<std::int64_t>((t - kT0) / 5), t);
    auto h = a.find_hang(t);
    ASSERT_FALSE(h.has_value()) << "at " << t - kT0 << " s: rank " << h->rank << " named";
  }
  EXPECT_GT(a.rank(1).behind_since, 0) << "it is behind";
}

TEST(Attempt, NoProgressForTheTimeoutIsAHang) {
  Attempt a = all_running(2);
  a.on_step(0, 3, kT0 + 2);
  a.on_step(1, 3, kT0 + 4);  // the last progress of any rank
  EXPECT_FALSE(a.find_hang(kT0 + 4 + kHangTimeout - 0.5).has_value());
  auto h = a.find_hang(kT0 + 4 + kHangTimeout);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->rank, -1) << "no rank in particular";
  EXPECT_EQ(h->top, 3);
}

TEST(Attempt, RanksThatNeverBeatHangOnlyWithoutAnyProgress) {
  Attempt a = all_running(2);  // running since kT0, never a step
  EXPECT_FALSE(a.find_hang(kT0 + kHangTimeout - 1).has_value());
  ASSERT_TRUE(a.find_hang(kT0 + kHangTimeout).has_value());
  EXPECT_EQ(a.find_hang(kT0 + kHangTimeout)->rank, -1);
}

TEST(Attempt, EndedRanksAreNeitherBehindNorAHang) {
  Attempt a = all_running(2);
  a.on_step(0, 1, kT0 + 1);
  a.on_step(1, 9, kT0 + 1);
  a.on_end(0);  // rank 0 ended on an earlier step
  for (double t = kT0 + 2; t < kT0 + 30; t += 1) {
    a.on_step(1, 9, t);
    EXPECT_FALSE(a.find_hang(t).has_value()) << "at " << t;
  }
  a.on_end(1);
  EXPECT_FALSE(a.find_hang(kT0 + 100).has_value()) << "every rank has ended";
}

TEST(Attempt, NoHangWhileStoppingOrOnceCalled) {
  Attempt hung = all_running(2);
  hung.mark_hung("no rank made progress for 10 s");
  EXPECT_TRUE(hung.hung());
  EXPECT_FALSE(hung.find_hang(kT0 + 100).has_value());

  Attempt stopping = all_running(2);
  stopping.begin_stop();
  EXPECT_FALSE(stopping.find_hang(kT0 + 100).has_value());
}

TEST(Attempt, StacksAreInOnceEveryRunningRankSentThem) {
  Attempt a = all_running(3);
  a.on_end(1);  // ended: it has no stacks to send
  a.on_stacks(0, "#0 main\n");
  EXPECT_FALSE(a.all_stacks_in());
  a.on_stacks(2, "#0 MPI_Allreduce\n");
  EXPECT_TRUE(a.all_stacks_in());
  EXPECT_EQ(a.rank(2).stacks.value_or(""), "#0 MPI_Allreduce\n");
}

}  // namespace
}  // namespace gpurun::launcher

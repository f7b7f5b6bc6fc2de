// shared_wait_test.cc: the shared-memory exchange's bounded waits (runtime/src/cpu/shared_wait.h,
// private): a wait ends when the counter arrives, and otherwise after the timeout with an error
// that names the step, what it waited for and the ranks behind with their pids.
#include "cpu/shared_wait.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace gpurun::runtime::cpu {
namespace {

using Clock = std::chrono::steady_clock;

TEST(SharedWaits, AWaitEndsWhenEveryRankArrived) {
  std::vector<RankArrivals> progress(2);
  Counter c;
  const SharedWaits rank0(progress.data(), 0, 2, 5.0), rank1(progress.data(), 1, 2, 5.0);
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rank1.arrive(c);
  });
  rank0.arrive(c);
  rank0.wait(c, 2, "a test", 0);
  other.join();
  EXPECT_EQ(c.n.load(), 2u);
  EXPECT_EQ(progress[0].arrivals.load(), 1u);
  EXPECT_EQ(progress[1].arrivals.load(), 1u);
  EXPECT_EQ(progress[0].pid.load(), std::int64_t(::getpid()));
}

TEST(SharedWaits, AStuckRankIsNamedAfterTheTimeout) {
  std::vector<RankArrivals> progress(3);
  Counter c;
  const SharedWaits r0(progress.data(), 0, 3, 0.3), r2(progress.data(), 2, 3, 0.3);
  progress[1].pid = 4242;  // rank 1 set up, then stopped before its first arrival
  r0.arrive(c);
  r2.arrive(c);
  const auto start = Clock::now();
  try {
    r0.wait(c, 3, "the small gradients of every rank", 16);
    FAIL() << "the wait ended without rank 1";
  } catch (const SharedWaitTimeout& e) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_GE(waited, 0.3);
    EXPECT_LT(waited, 5.0);
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0 waited 0.3 s (the communication timeout) at step 17 for the "
                        "small gradients of every rank (2 of 3 arrivals)"),
              std::string::npos) << what;
    EXPECT_NE(what.find("behind: rank 1 (pid 4242), 0 arrivals against 1"), std::string::npos)
        << what;
  }
}

TEST(SharedWaits, WithNoRankBehindAThreadIsStuck) {
  std::vector<RankArrivals> progress(2);
  Counter c;
  const SharedWaits r0(progress.data(), 0, 2, 0.1), r1(progress.data(), 1, 2, 0.1);
  r0.arrive(c);
  r1.arrive(c);
  EXPECT_NE(r0.behind().find("no rank (every rank arrived 1 times: a thread"), std::string::npos)
      << r0.behind();
  EXPECT_THROW(r0.wait(c, 3, "a member that never comes", 0), SharedWaitTimeout);
}

TEST(SharedWaits, TheTimeoutMustBePositive) {
  std::vector<RankArrivals> progress(1);
  EXPECT_THROW(SharedWaits(progress.data(), 0, 1, 0.0), std::invalid_argument);
  EXPECT_THROW(SharedWaits(progress.data(), 0, 1, -1.0), std::invalid_argument);
}

}  // namespace
}  // namespace gpurun::runtime::cpu

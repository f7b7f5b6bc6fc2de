// Pins common::PeriodicThread: a run at once and then one per period, the task ending the thread,
// stop() ending it from outside (and saying so on stopping_fd()), the eventfd's readiness between
// notify() and drain(), signals blocked in the thread, and no burst of runs after one that overran.
// Bounds on counts are loose on the side a slow machine can reach (fewer runs), tight on the side
// only a bug can.
#include "gpurun/common/periodic.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gpurun::common {
namespace {

using std::chrono::milliseconds;

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

// Waits up to 10 s for cond(), checking every millisecond.
template <class F>
bool eventually(F cond) {
  for (int i = 0; i < 10000 && !cond(); ++i) std::this_thread::sleep_for(milliseconds(1));
  return cond();
}

TEST(PeriodicThread, RunsAtOnceThenOncePerPeriodUntilStopped) {
  std::atomic<int> runs{0};
  PeriodicThread t(milliseconds(20), [&] {
    ++runs;
    return true;
  });
  ASSERT_TRUE(eventually([&] { return runs.load() >= 1; }));
  std::this_thread::sleep_for(milliseconds(200));
  const int seen = runs.load();
  EXPECT_GE(seen, 2) << "no run after the first in 200 ms at a 20 ms period";
  EXPECT_LE(seen, 13) << "more runs than 200 ms / 20 ms allow";
  EXPECT_FALSE(t.stopping());
  EXPECT_FALSE(readable(t.stopping_fd()));
  t.stop();
  EXPECT_TRUE(t.stopping());
  EXPECT_TRUE(readable(t.stopping_fd()));
  const int at_stop = runs.load();
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(runs.load(), at_stop) << "a run after stop()";
}

TEST(PeriodicThread, RunSoonRunsAtOnceAndAgainAfterARunUnderWay) {
  std::atomic<int> runs{0};
  std::atomic<bool> hold{false};
  PeriodicThread t(milliseconds(100000), [&] {
    while (hold.load()) std::this_thread::yield();
    ++runs;
    return true;
  });
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }));
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(runs.load(), 1) << "a second run long before its 100 s period";
  t.run_soon();
  ASSERT_TRUE(eventually([&] { return runs.load() == 2; })) << "run_soon() did not wake the thread";
  // Asked while a run is under way: one more run right after it, not a wait of a period.
  hold = true;
  t.run_soon();
  ASSERT_TRUE(eventually([&] { return runs.load() >= 2; }));
  std::this_thread::sleep_for(milliseconds(20));
  t.run_soon();
  hold = false;
  ASSERT_TRUE(eventually([&] { return runs.load() >= 4; }))
      << "a run_soon() during a run was lost: " << runs.load() << " runs";
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_LE(runs.load(), 4) << "run_soon() started a burst of runs";
}

TEST(PeriodicThread, TaskReturningFalseEndsTheThread) {
  std::atomic<int> runs{0};
  PeriodicThread t(milliseconds(5), [&] {
    ++runs;
    return false;
  });
  ASSERT_TRUE(eventually([&] { return runs.load() >= 1; }));
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(runs.load(), 1);
}

TEST(PeriodicThread, FdIsReadableFromNotifyUntilDrain) {
  std::atomic<int> runs{0};
  PeriodicThread* self = nullptr;
  std::atomic<bool> ready{false};
  PeriodicThread t(milliseconds(100000), [&] {
    while (!ready.load()) std::this_thread::yield();
    ++runs;
    self->notify();
    return true;
  });
  self = &t;
  EXPECT_FALSE(readable(t.fd()));
  ready = true;
  ASSERT_TRUE(eventually([&] { return readable(t.fd()); }));
  EXPECT_EQ(runs.load(), 1);
  t.drain();
  EXPECT_FALSE(readable(t.fd()));
  t.drain();  // draining an empty one neither blocks nor fails
  EXPECT_FALSE(readable(t.fd()));
}

TEST(PeriodicThread, RunsWithEverySignalBlocked) {
  std::atomic<int> blocked{-1};
  sigset_t none;
  sigemptyset(&none);
  sigset_t before;
  pthread_sigmask(SIG_SETMASK, &none, &before);  // the owner blocks nothing
  {
    PeriodicThread t(milliseconds(1000), [&] {
      sigset_t mine;
      pthread_sigmask(SIG_SETMASK, nullptr, &mine);
      blocked =
          sigismember(&mine, SIGTERM) && sigismember(&mine, SIGUSR1) && sigismember(&mine, SIGCHLD);
      return false;
    });
    ASSERT_TRUE(eventually([&] { return blocked.load() >= 0; }));
    EXPECT_EQ(blocked.load(), 1);
    sigset_t owner;
    pthread_sigmask(SIG_SETMASK, nullptr, &owner);
    EXPECT_FALSE(sigismember(&owner, SIGTERM)) << "the owner's mask changed";
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

TEST(PeriodicThread, AnOverrunIsNotFollowedByABurst) {
  std::atomic<int> runs{0};
  std::atomic<bool> slow_done{false};
  PeriodicThread t(milliseconds(10), [&] {
    if (++runs == 1) {
      std::this_thread::sleep_for(milliseconds(150));  // 15 periods late
      slow_done = true;
    }
    return true;
  });
  ASSERT_TRUE(eventually([&] { return slow_done.load(); }));
  std::this_thread::sleep_for(milliseconds(30));
  // Catching up would run ~15 times at once; steady runs give 1 + about 3 here.
  EXPECT_LE(runs.load(), 8);
}

}  // namespace
}  // namespace gpurun::common

// Pins runtime::WorkerPool (runtime/src/cpu/worker_pool.h, private): every worker runs each job once
// and run() returns only when all have; many runs back to back (the spin-then-sleep handshake
// must lose no start and no finish, whether the other side spins or sleeps); a worker's exception
// reaches the caller and the pool stays usable; a pool idle long enough for its workers to sleep
// still starts them, and is destroyed cleanly while they sleep.
#include "cpu/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace gpurun::runtime {
namespace {

TEST(WorkerPool, EveryWorkerRunsEachJobOnceAndRunWaitsForAll) {
  WorkerPool pool(3);
  std::vector<std::atomic<int>> ran(3);
  pool.run([&](int w) {
    if (w == 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the last to finish
    ++ran[std::size_t(w)];
  });
  for (auto& r : ran) EXPECT_EQ(r.load(), 1);
}

// 2 workers spin (this machine has 2 cores); 4 sleep and wake each run.
TEST(WorkerPool, ManyRunsBackToBackLoseNoStartOrFinish) {
  for (int workers : {2, 4}) {
    WorkerPool pool(workers);
    std::vector<long> sums(std::size_t(workers), 0);
    const int runs = 20000;
    for (int i = 0; i < runs; ++i) pool.run([&](int w) { sums[std::size_t(w)] += i; });
    const long want = long(runs) * (runs - 1) / 2;
    for (long s : sums) EXPECT_EQ(s, want) << workers << " workers";
  }
}

TEST(WorkerPool, AWorkersExceptionReachesTheCallerAndThePoolGoesOn) {
  WorkerPool pool(2);
  EXPECT_THROW(pool.run([](int w) {
    if (w == 1) throw std::runtime_error("worker 1");
  }),
               std::runtime_error);
  std::atomic<int> ran{0};
  pool.run([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 2);
}

TEST(WorkerPool, SleepingWorkersWakeAndEndCleanly) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(2);
    pool.run([&](int) { ++ran; });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin: asleep
    pool.run([&](int) { ++ran; });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }  // the destructor wakes the sleeping worker and joins it
  EXPECT_EQ(ran.load(), 4);
  WorkerPool one(1);  // the caller alone
  one.run([&](int w) { ran += 10 + w; });
  EXPECT_EQ(ran.load(), 14);
}

}  // namespace
}  // namespace gpurun::runtime

// stop_signal.h: SIGUSR1, SIGUSR2 and SIGTERM ask the job to checkpoint and stop. The trainer
// folds the flag into the step's exchange, so all ranks agree to stop at the same step boundary
// even when only one rank was signalled.
//
// The signals are taken by one thread of their own, never by a thread that computes: with them
// delivered asynchronously into oneDNN's JIT-compiled AVX-512 kernels, 2-rank runs stopped by
// SIGUSR1 under load died of heap corruption (1 run in 5 to 8; never with OpenBLAS, never
// without the signal). A program blocks them in its main thread before any other thread starts
// (block_stop_signals(), so that MPI's, OpenBLAS's and the trainer's threads inherit the block);
// StopSignalGuard then waits for them in a thread with sigwait. A signal sent before the guard
// exists stays pending and stops the run at its first step.
#pragma once

#include <atomic>
#include <thread>

namespace gpurun::runtime {

// Blocks SIGUSR1, SIGUSR2 and SIGTERM in the calling thread and in every thread it starts from
// now on. Call it first thing in main(). Never throws.
void block_stop_signals() noexcept;

// Takes the stop signals for its lifetime: a thread waits for them (sigwait) and records the
// last one; a handler that only records covers threads that do not block them (a program that
// did not call block_stop_signals()). The previous dispositions come back on destruction.
class StopSignalGuard {
 public:
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  // The signal received since installation, or 0.
  static int received();
  // For tests: behave as if `sig` arrived.
  static void raise_for_test(int sig);

 private:
  std::atomic<bool> done_{false};
  std::thread waiter_;
};

}  // namespace gpurun::runtime

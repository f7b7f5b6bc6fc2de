// stop_signal.h: SIGUSR1, SIGUSR2 and SIGTERM ask the job to checkpoint and stop. The handler only
// records the signal; the trainer folds the flag into the step's allreduce, so all ranks agree to
// stop at the same step boundary even when only one rank was signalled.
#pragma once

namespace gpurun::runtime {

// Installs the handlers for its lifetime and restores the previous ones on destruction.
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
};

}  // namespace gpurun::runtime

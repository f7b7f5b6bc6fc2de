// periodic.h: a thread that runs a task at once and then once per period until it is stopped or
// the task says so, for work that must stay off an owner's single-threaded poll loop because it
// can take seconds (sampling GPUs through NVML or nvidia-smi). The task hands its results to its
// owner by itself (under the owner's lock) and calls notify(); the owner polls fd(), which is
// readable from then until drain(). The thread runs with every signal blocked, so signals stay
// with the owner's loop (a signalfd sees them).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "gpurun/common/posix.h"

namespace gpurun::common {

class PeriodicThread {
 public:
  // The period is steady: each run is due one period after the one before was due; a run that
  // overruns is followed at once by the next, never by a burst. task() returns false to end the
  // thread. Throws std::runtime_error when the eventfd cannot be made.
  PeriodicThread(std::chrono::milliseconds period, std::function<bool()> task);
  ~PeriodicThread();  // stop()
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  void stop();  // no run after the one under way; joins the thread
  int fd() const { return event_.get(); }
  // Readable from the moment stop() is called: a task blocked on a tool (nvidia-smi) polls it
  // too, and gives up at once, so stop() need not wait for the tool's own timeout.
  int stopping_fd() const { return stopping_.get(); }
  bool stopping() const;  // stop() was called
  void notify();          // from the task: fd() turns readable
  void drain();           // from the owner: fd() is no longer readable until the next notify()
  // From the owner: the next run starts now rather than when due (after the run under way, if
  // one is), and the period counts from it.
  void run_soon();

 private:
  void loop();

  const std::chrono::milliseconds period_;
  const std::function<bool()> task_;
  Fd event_;
  Fd stopping_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool soon_ = false;
  std::thread thread_;
};

}  // namespace gpurun::common

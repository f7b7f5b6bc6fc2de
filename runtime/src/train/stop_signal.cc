// stop_signal.cc: the stop signals' waiter thread and the record-only handler (stop_signal.h).
#include "gpurun/runtime/stop_signal.h"

#include <pthread.h>
#include <signal.h>

#include <cstring>
#include <ctime>
#include <stdexcept>

#include "gpurun/common/posix.h"

namespace gpurun::runtime {
namespace {

volatile sig_atomic_t g_received = 0;
constexpr int kSignals[] = {SIGUSR1, SIGUSR2, SIGTERM};
struct sigaction g_previous[3];

void on_signal(int sig) {
  g_received = sig;
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kSignals) sigaddset(&set, s);
  return set;
}

}  // namespace

void block_stop_signals() noexcept {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

StopSignalGuard::StopSignalGuard() {
  g_received = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // an interrupted write or MPI poll resumes instead of failing
  for (int i = 0; i < 3; ++i) {
    if (sigaction(kSignals[i], &sa, &g_previous[i]) != 0) {
      throw std::runtime_error("cannot install the handler for " +
                               common::signal_name(kSignals[i]));
    }
  }
  // The waiter blocks the signals itself (sigwait takes only blocked ones) and looks up every
  // 50 ms whether the guard is going away.
  waiter_ = std::thread([this] {
    const sigset_t set = stop_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    const timespec tick{0, 50'000'000};
    while (!done_.load()) {
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig > 0) g_received = sig;
    }
  });
}

StopSignalGuard::~StopSignalGuard() {
  done_ = true;
  waiter_.join();
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

int StopSignalGuard::received() {
  return g_received;
}

void StopSignalGuard::raise_for_test(int sig) {
  g_received = sig;
}

}  // namespace gpurun::runtime

// stop_signal.cc: async-signal-safe handlers: they store the signal number and nothing else.
#include "gpurun/runtime/stop_signal.h"

#include <signal.h>

#include <cstring>
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

}  // namespace

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
}

StopSignalGuard::~StopSignalGuard() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

int StopSignalGuard::received() {
  return g_received;
}
void StopSignalGuard::raise_for_test(int sig) {
  g_received = sig;
}

}  // namespace gpurun::runtime

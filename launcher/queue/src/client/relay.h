// relay.h: gpuq run's side of a running interactive job (attach.h): it passes signals to the job,
// relays a pseudo-terminal (--pty) between the caller's terminal and the job, and returns the
// job's exit status when the supervisor reports it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gpurun/common/posix.h"

namespace gpurun::queue {

using common::Fd;

// Blocks the signals gpuq run handles itself (Ctrl-C, termination, window size) and returns a
// signalfd for them, so every wait polls it with the rest.
Fd block_client_signals();

// A pseudo-terminal whose slave side goes to the job: the caller's window size and modes.
struct Pty {
  Fd master, slave;
};
Pty open_pty();

// The caller's terminal in raw mode while it lives (keys reach the job's terminal untouched:
// Ctrl-C becomes the job's SIGINT there), restored on destruction. Keys typed before it (while
// the job was queued) are kept, not flushed: they go to the job first.
class RawTerminal {
 public:
  RawTerminal();
  ~RawTerminal();
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  bool active_ = false;
  struct State;
  State* saved_ = nullptr;
};

// Runs until the supervisor says "EXIT": relays `master` (if valid) to and from stdin/stdout,
// forwards signals from `sigfd` as "SIG n". Returns the job's exit status as a shell would show it
// (its code, or 128 + the signal), or nullopt when the supervisor went away without saying. When
// the caller's terminal hangs up, the job gets SIGHUP; if it has not ended 5 s later, 129 (128 +
// SIGHUP): the caller leaves, and the daemon cancels the job once its connection is gone.
std::optional<int> relay_session(int sock, int sigfd, int master);

}  // namespace gpurun::queue

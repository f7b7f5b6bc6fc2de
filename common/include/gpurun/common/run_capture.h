// run_capture.h: runs a tool and returns what it printed, killing it when it takes too long. The
// GPU sampler's nvidia-smi backend needs the bound (nvidia-smi can hang on a failing GPU) and
// must not go through a shell; gpurun asks srun what it supports.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gpurun::common {

struct Captured {
  std::string output;            // stdout and stderr together, at most max_bytes
  std::optional<int> exit_code;  // nullopt: killed by a signal, or the status could not be had
  bool timed_out = false;
  bool cancelled = false;  // cancel_fd turned readable: killed, the output cut short
};

// Runs argv[0] (a path, or a name looked up on PATH) with stdin from /dev/null. A cancel_fd (>= 0)
// that turns readable kills the tool at once (its owner is stopping). Throws common::Error when it cannot
// be started at all.
inline constexpr size_t kCaptureMaxBytes = 1 << 20;
Captured run_capture(const std::vector<std::string>& argv, int timeout_ms,
                     size_t max_bytes = kCaptureMaxBytes, int cancel_fd = -1);

}  // namespace gpurun::common

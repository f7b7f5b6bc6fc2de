// heartbeat.h: the rank's side of gpurun's progress contract. gpurun's rank wrapper creates a
// file per rank and names it in GPURUN_HEARTBEAT; the rank writes its step number there, as
// decimal ASCII at offset 0, whenever it makes progress, and the wrapper reads it about once a
// second: a number that stops changing is a hang (gpurun --hang-timeout). One pwrite of a fixed
// 18-digit, zero-padded field and a newline per beat, so a reader never sees a torn or shortened
// number. A heartbeat that cannot be written is reported once and then left alone: training
// goes on.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "gpurun/common/posix.h"

namespace gpurun::runtime {

// gpurun's reader takes at most 18 digits (any int64 step without overflow): with the 20 this
// field had before, every beat was unreadable and a silent epoch was called a hang.
inline constexpr int kHeartbeatDigits = 18;

class Heartbeat {
 public:
  // An empty path: no heartbeat (the program runs outside gpurun). `log` gets the one warning.
  Heartbeat(const std::string& path, std::ostream& log);
  void beat(std::int64_t step);
  bool active() const { return bool(fd_); }

 private:
  std::string path_;
  std::ostream& log_;
  common::Fd fd_;
};

}  // namespace gpurun::runtime

// heartbeat.cc: see heartbeat.h.
#include "heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ostream>

namespace gpurun::runtime {

Heartbeat::Heartbeat(const std::string& path, std::ostream& log) : path_(path), log_(log) {
  if (path.empty()) return;
  fd_.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_) {
    log_ << "warning: cannot open the heartbeat file " << path
         << " (GPURUN_HEARTBEAT): " << std::strerror(errno)
         << "; gpurun sees this rank's progress only by its output\n";
  }
}

void Heartbeat::beat(std::int64_t step) {
  if (!fd_) return;
  char field[kHeartbeatDigits + 2];
  std::snprintf(field, sizeof field, "%0*lld\n", kHeartbeatDigits, static_cast<long long>(step));
  if (::pwrite(fd_.get(), field, kHeartbeatDigits + 1, 0) != kHeartbeatDigits + 1) {
    log_ << "warning: writing the heartbeat file " << path_ << " failed: " << std::strerror(errno)
         << "; no more heartbeats\n";
    fd_.reset();
  }
}

}  // namespace gpurun::runtime

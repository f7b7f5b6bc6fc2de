// Length-prefixed framing and fd helpers for gpuq (protocol.h).
#include "gpurun/queue/protocol.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace gpurun::queue {

std::string frame(const std::string& payload) {
  uint32_t n = static_cast<uint32_t>(payload.size());
  std::string out;
  out.reserve(payload.size() + 4);
  out += static_cast<char>((n >> 24) & 0xff);
  out += static_cast<char>((n >> 16) & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  out += static_cast<char>(n & 0xff);
  out += payload;
  return out;
}

bool FrameReader::feed(const char* data, size_t n) {
  size_t i = 0;
  while (!have_header_ && i < n) {
    header_ += data[i++];
    if (header_.size() == 4) {
      const auto* b = reinterpret_cast<const unsigned char*>(header_.data());
      want_ = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
      if (want_ > max_)
        throw std::runtime_error(
            fmt::format("request of {} bytes is larger than the limit of {} bytes", want_, max_));
      have_header_ = true;
      // Grown as bytes arrive, not reserved from the header: 64 connections that each announce
      // 8 MiB and send nothing must not make the daemon hold 512 MiB.
      payload_.reserve(std::min<uint32_t>(want_, 65536));
    }
  }
  if (have_header_) {
    size_t take = std::min<size_t>(n - i, want_ - payload_.size());
    payload_.append(data + i, take);
    if (payload_.size() == want_) return true;
  }
  return false;
}

Fd connect_unix(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path))
    throw std::runtime_error(fmt::format("socket path '{}' is too long", path));
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw std::runtime_error(fmt::format("socket(): {}", strerror(errno)));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    throw std::runtime_error(
        fmt::format("cannot connect to the gpuq daemon at {}: {} (is `gpuq "
                    "daemon` running? set --socket or GPUQ_SOCKET)",
                    path, strerror(errno)));
  // A daemon runs as root (the shared one) or as the user (their own). Anything else listening
  // there (a socket another user made in /tmp, where the client looks last) would be sent the
  // job's script and environment.
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0)
    throw std::runtime_error(
        fmt::format("{}: cannot tell who serves it: {}", path, strerror(errno)));
  if (peer.uid != 0 && peer.uid != geteuid())
    throw std::invalid_argument(fmt::format(
        "refusing the socket {}: it is served by uid {} (pid {}), neither root nor you; a gpuq "
        "daemon runs as one of them (remove it, or name your daemon's socket with --socket or "
        "GPUQ_SOCKET)",
        path, peer.uid, peer.pid));
  return fd;
}

void write_all(int fd, const std::string& bytes) {
  if (!common::write_all(fd, bytes))
    throw std::runtime_error(fmt::format("write to gpuq daemon: {}", strerror(errno)));
}

std::string read_frame(int fd, uint32_t max_bytes) {
  FrameReader reader(max_bytes);
  char buf[65536];
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("read from gpuq daemon: {}", strerror(errno)));
    }
    if (r == 0) throw std::runtime_error("the gpuq daemon closed the connection without a reply");
    if (reader.feed(buf, static_cast<size_t>(r))) return reader.payload();
  }
}

}  // namespace gpurun::queue

// gpuq wire protocol: one request and one reply per connection on a Unix stream socket, each a
// 4-byte big-endian length followed by that many bytes of JSON. Requests are bounded
// (kMaxRequestBytes) so a client cannot make the daemon buffer without limit; replies (a queue of
// 10,000 jobs) may be larger, up to kMaxReplyBytes: the daemon answers a larger one with an error
// that names the limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gpurun/common/posix.h"

namespace gpurun::queue {

constexpr uint32_t kMaxRequestBytes = 8u << 20;  // 8 MiB: a script plus its environment
constexpr uint32_t kMaxReplyBytes = 64u << 20;

// The owned file descriptor gpuq uses everywhere (common/posix.h).
using Fd = common::Fd;

// "\0\0\0\5hello" for "hello".
std::string frame(const std::string& payload);

// Incremental decoder for one frame, fed from a non-blocking socket. Throws std::runtime_error when
// the announced length exceeds `max_bytes`.
class FrameReader {
 public:
  explicit FrameReader(uint32_t max_bytes) : max_(max_bytes) {}
  // Appends bytes; returns true once a whole frame has arrived (payload() then holds it).
  bool feed(const char* data, size_t n);
  const std::string& payload() const { return payload_; }
  size_t buffered() const { return header_.size() + payload_.size(); }

 private:
  uint32_t max_;
  std::string header_;
  std::string payload_;
  uint32_t want_ = 0;
  bool have_header_ = false;
};

// Blocking helpers for the client side. Throw std::runtime_error naming the socket path on error.
// connect_unix throws std::invalid_argument when the socket's server is neither root nor this
// user (SO_PEERCRED): nothing is sent to it.
Fd connect_unix(const std::string& path);
void write_all(int fd, const std::string& bytes);    // to the daemon
std::string read_frame(int fd, uint32_t max_bytes);  // throws on EOF before a whole frame

}  // namespace gpurun::queue

// node_bandwidth.cc: --preflight-bandwidth's echo exchange (node_checks.h). The wire: the client
// sends the byte count (8 bytes, big-endian), the server answers one byte 'G' when it takes the
// connection up (so time spent waiting for its turn is not timed), then echoes every byte back.
// The bytes follow a pattern the client checks on their way back, so a link that corrupts data is
// caught as well as a slow one.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "gpurun/common/error.h"
#include "sys/proc_util.h"
#include "wrapper/node_checks.h"

namespace gpurun::launcher::node_checks {
namespace {

constexpr std::size_t kChunk = 64 << 10;
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 30;
constexpr int kServeIdleMs = 10000;  // a client that stops sending gives its turn up after this

unsigned char pattern(std::int64_t i) {
  return static_cast<unsigned char>((i % 256) * 131 + 7);
}

// Waits until `fd` is ready for `events` or `stop` (>= 0) turns readable; false on timeout/stop.
bool wait_for(int fd, short events, int stop, int timeout_ms) {
  pollfd p[2] = {{fd, events, 0}, {stop, POLLIN, 0}};
  if (poll(p, stop >= 0 ? 2 : 1, timeout_ms) <= 0) return false;
  return !(stop >= 0 && (p[1].revents & POLLIN)) && p[0].revents != 0;
}

// All of `data` on a blocking socket; never SIGPIPE (a client that gave up closes its end).
bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// One client's turn: the count, 'G', then every byte back.
void serve(int fd, int stop) {
  unsigned char head[8];
  std::size_t got = 0;
  while (got < sizeof head) {
    if (!wait_for(fd, POLLIN, stop, kServeIdleMs)) return;
    ssize_t n = read(fd, head + got, sizeof head - got);
    if (n <= 0) return;
    got += static_cast<std::size_t>(n);
  }
  std::int64_t bytes = 0;
  for (unsigned char b : head) bytes = (bytes << 8) | b;
  if (bytes <= 0 || bytes > kMaxBytes || !send_all(fd, "G")) return;
  std::vector<char> buf(kChunk);
  for (std::int64_t echoed = 0; echoed < bytes;) {
    if (!wait_for(fd, POLLIN, stop, kServeIdleMs)) return;
    ssize_t n = read(fd, buf.data(),
                     static_cast<std::size_t>(std::min<std::int64_t>(kChunk, bytes - echoed)));
    if (n <= 0 || !send_all(fd, std::string_view(buf.data(), static_cast<std::size_t>(n)))) return;
    echoed += n;
  }
}

}  // namespace

struct BandwidthServer::Impl {
  net::Listener listener;
  common::Fd stop_r, stop_w;
  std::thread thread;

  void run() {
    while (true) {
      pollfd p[2] = {{listener.fd.get(), POLLIN, 0}, {stop_r.get(), POLLIN, 0}};
      if (poll(p, 2, -1) < 0 && errno != EINTR) return;
      if (p[1].revents & POLLIN) return;
      if (!(p[0].revents & POLLIN)) continue;
      common::Fd c(accept4(listener.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      net::no_delay(c.get());
      serve(c.get(), stop_r.get());  // one at a time: each link timed alone
    }
  }
};

BandwidthServer::BandwidthServer() : impl_(std::make_unique<Impl>()) {
  impl_->listener = net::listen_tcp(false, "--preflight-bandwidth's listener");
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    throw common::Error(fmt::format("--preflight-bandwidth: pipe: {}", strerror(errno)));
  impl_->stop_r.reset(p[0]);
  impl_->stop_w.reset(p[1]);
  impl_->thread = std::thread([this] { impl_->run(); });
}

BandwidthServer::~BandwidthServer() {
  common::write_all(impl_->stop_w.get(), "x");
  impl_->thread.join();
}

int BandwidthServer::port() const {
  return impl_->listener.port;
}

double measure_bandwidth(const std::string& host, int port, std::int64_t bytes, double timeout_s) {
  const double deadline = proc::now_seconds() + timeout_s;
  auto left_ms = [&] {
    return std::max(1, static_cast<int>((deadline - proc::now_seconds()) * 1000));
  };
  common::Fd s = net::connect_tcp(host, std::to_string(port), std::min(5.0, timeout_s),
                                  "--preflight-bandwidth to rank 0's wrapper");
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i)
    head[static_cast<std::size_t>(7 - i)] = static_cast<char>(bytes >> (8 * i));
  char go = 0;
  if (!send_all(s.get(), head) || !wait_for(s.get(), POLLIN, -1, left_ms()) ||
      read(s.get(), &go, 1) != 1 || go != 'G')
    throw common::Error(
        fmt::format("{}:{} did not take the exchange up within {:.0f} s", host, port, timeout_s));
  fcntl(s.get(), F_SETFL, O_NONBLOCK);
  std::vector<char> out(kChunk + 256), in(kChunk);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(pattern(static_cast<std::int64_t>(i)));
  const double t0 = proc::now_seconds();
  std::int64_t sent = 0, got = 0;
  while (got < bytes) {
    pollfd p{s.get(), static_cast<short>(POLLIN | (sent < bytes ? POLLOUT : 0)), 0};
    if (proc::now_seconds() >= deadline || poll(&p, 1, left_ms()) <= 0)
      throw common::Error(
          fmt::format("{} of {} bytes came back within {:.0f} s", got, bytes, timeout_s));
    if ((p.revents & POLLOUT) && sent < bytes) {
      std::size_t n = static_cast<std::size_t>(std::min<std::int64_t>(kChunk, bytes - sent));
      ssize_t w = send(s.get(), out.data() + sent % 256, n, MSG_NOSIGNAL);
      if (w > 0) sent += w;
    }
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t r = read(s.get(), in.data(), in.size());
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
      throw common::Error(fmt::format("the connection closed after {} of {} bytes", got, bytes));
    for (ssize_t j = 0; j < r; ++j)
      if (static_cast<unsigned char>(in[static_cast<std::size_t>(j)]) != pattern(got + j))
        throw common::Error(fmt::format("byte {} came back changed", got + j));
    got += std::max<ssize_t>(r, 0);
  }
  const double secs = std::max(proc::now_seconds() - t0, 1e-6);
  return static_cast<double>(bytes) / secs / 1e6;
}

}  // namespace gpurun::launcher::node_checks

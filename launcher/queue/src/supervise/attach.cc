// The attach protocol of `gpuq run` (attach.h).
#include "supervise/attach.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace gpurun::queue {

namespace {

constexpr size_t kMaxLine = 256;

sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof(addr.sun_path))
    throw std::invalid_argument(fmt::format("attach socket name too long: {}", name));
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(fmt::format("getrandom: {}", strerror(errno)));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char c : raw) hex += fmt::format("{:02x}", c);
  return hex;
}

AttachListener listen_attach(bool pty) {
  AttachListener l;
  l.spec.pty = pty;
  l.spec.token = random_hex(kAttachTokenHex / 2);
  for (int tries = 0; tries < 8; ++tries) {
    l.spec.socket = fmt::format("gpuq-run-{}-{}", getuid(), random_hex(8));
    l.fd = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!l.fd) throw std::runtime_error(fmt::format("socket: {}", strerror(errno)));
    socklen_t len = 0;
    sockaddr_un addr = abstract_address(l.spec.socket, &len);
    if (::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      if (::listen(l.fd.get(), 4) != 0)
        throw std::runtime_error(fmt::format("listen: {}", strerror(errno)));
      return l;
    }
    if (errno != EADDRINUSE)
      throw std::runtime_error(fmt::format("bind @{}: {}", l.spec.socket, strerror(errno)));
  }
  throw std::runtime_error("no free name for gpuq run's socket after 8 tries");
}

std::set<std::string> listening_abstract_sockets(std::istream& in) {
  constexpr unsigned long kAcceptCon = 0x10000;  // __SO_ACCEPTCON in Flags: a listening socket
  std::set<std::string> names;
  std::string line;
  std::getline(in, line);  // "Num RefCount Protocol Flags Type St Inode Path"
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string num, refs, protocol, flags, type, st, inode, path;
    if (!(fields >> num >> refs >> protocol >> flags >> type >> st >> inode >> path)) continue;
    char* end = nullptr;
    const unsigned long bits = std::strtoul(flags.c_str(), &end, 16);
    if (end && *end == '\0' && (bits & kAcceptCon) && path.size() > 1 && path[0] == '@')
      names.insert(path.substr(1));
  }
  return names;
}

Fd connect_attach(const std::string& name) {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw std::runtime_error(fmt::format("socket: {}", strerror(errno)));
  socklen_t len = 0;
  sockaddr_un addr = abstract_address(name, &len);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
    throw std::runtime_error(fmt::format("connect @{}: {}", name, strerror(errno)));
  return fd;
}

AttachedClient attach_to_client(const AttachSpec& spec, int64_t job_id, uid_t uid,
                                int timeout_ms) {
  AttachedClient c;
  c.sock = connect_attach(spec.socket);
  const auto peer = peer_credentials(c.sock.get());
  if (!peer || peer->uid != uid)
    throw std::runtime_error(fmt::format("@{} is not job {}'s user's (uid {}) but uid {}",
                                         spec.socket, job_id, uid, peer ? int(peer->uid) : -1));
  send_line(c.sock.get(), fmt::format("{} {} {}\n", kAttachHello, job_id, spec.token));
  LineReader in(c.sock.get());
  const auto line = in.read_line(timeout_ms);
  c.stdio = in.take_fds();
  if (!line || *line != "FDS" || c.stdio.size() != 3)
    throw std::runtime_error(fmt::format("gpuq run's client at @{} did not hand over its terminal "
                                         "within {} s",
                                         spec.socket, timeout_ms / 1000));
  return c;
}

Fd accept_supervisor(const AttachListener& listener, int64_t job_id,
                     const std::vector<int>& stdio, int timeout_ms) {
  const int64_t give_up = steady_ms() + timeout_ms;
  const std::string hello = fmt::format("{} {} {}", kAttachHello, job_id, listener.spec.token);
  for (int64_t left; (left = give_up - steady_ms()) > 0;) {
    pollfd p{listener.fd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    Fd conn(::accept4(listener.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) continue;
    const auto peer = peer_credentials(conn.get());
    if (!peer || (peer->uid != 0 && peer->uid != geteuid())) continue;
    LineReader in(conn.get());
    const auto line = in.read_line(5000);
    if (!line || *line != hello) continue;
    send_line(conn.get(), "FDS\n", stdio);
    return conn;
  }
  return Fd();
}

std::optional<ucred> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return cred;
}

ssize_t send_with_fds(int sock, std::string_view data, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(data.data()), data.size()};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (!fds.empty()) {
    if (fds.size() > kMaxPassedFds) throw std::invalid_argument("too many descriptors to pass");
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do n = ::sendmsg(sock, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

ssize_t recv_with_fds(int sock, char* buf, size_t len, int flags, std::vector<Fd>* fds) {
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  iovec iov{buf, len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof(ctl);
  const ssize_t n = ::recvmsg(sock, &m, flags | MSG_CMSG_CLOEXEC);
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); n > 0 && c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->emplace_back(fd);
    }
  }
  return n;
}

void send_line(int sock, const std::string& line, const std::vector<int>& fds) {
  if (send_with_fds(sock, line, fds) != static_cast<ssize_t>(line.size()))
    // one short line: all of it or nothing
    throw std::runtime_error(fmt::format("send to gpuq run's socket: {}", strerror(errno)));
}

bool LineReader::read_some() {
  char buf[kMaxLine];
  const ssize_t n = recv_with_fds(fd_, buf, sizeof(buf), MSG_DONTWAIT, &fds_);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  buf_.append(buf, static_cast<size_t>(n));
  return buf_.size() <= 4 * kMaxLine;  // a peer that never ends its line is a broken peer
}

bool LineReader::poll_lines(std::vector<std::string>* lines) {
  while (!eof_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) break;
    if (!read_some()) eof_ = true;
  }
  for (size_t nl; (nl = buf_.find('\n')) != std::string::npos; buf_.erase(0, nl + 1))
    lines->push_back(buf_.substr(0, nl));
  return !eof_;
}

std::optional<std::string> LineReader::read_line(int timeout_ms) {
  const int64_t give_up = steady_ms() + timeout_ms;
  while (buf_.find('\n') == std::string::npos && !eof_) {
    const int64_t left = give_up - steady_ms();
    if (left <= 0) return std::nullopt;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) > 0 && !read_some()) eof_ = true;
  }
  const size_t nl = buf_.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  std::string line = buf_.substr(0, nl);
  buf_.erase(0, nl + 1);
  return line;
}

}  // namespace gpurun::queue

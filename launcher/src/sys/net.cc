// net.cc: see net.h.
#include "sys/net.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "gpurun/launcher/error.h"
#include "sys/proc_util.h"

namespace gpurun::launcher::net {

Listener listen_tcp(bool loopback, const std::string& what) {
  Listener l;
  l.fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!l.fd) throw Error(fmt::format("{}: socket: {}", what, strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
  a.sin_port = 0;
  // The kernel caps the backlog at net.core.somaxconn: where that is raised, 16,384 nodes'
  // connections can all wait to be accepted.
  if (bind(l.fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(l.fd.get(), 65535) != 0)
    throw Error(fmt::format("{}: {}", what, strerror(errno)));
  socklen_t len = sizeof a;
  if (getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw Error(fmt::format("{}: getsockname: {}", what, strerror(errno)));
  l.port = ntohs(a.sin_port);
  return l;
}

namespace {

common::Fd reusable_socket() {
  common::Fd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  int one = 1;
  if (s) setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  return s;
}

bool bind_any(int fd, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

int bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// Holder and probe on `port` (0: the kernel picks); nullopt when the port is taken.
std::optional<PortHold> try_hold(int port) {
  PortHold h;
  h.holder = reusable_socket();
  if (!h.holder || !bind_any(h.holder.get(), port)) return std::nullopt;
  h.port = bound_port(h.holder.get());
  // Another reusable socket on the same port; both bound before either listens.
  h.probe = reusable_socket();
  if (!h.probe || !bind_any(h.probe.get(), h.port) || listen(h.probe.get(), 4096) != 0)
    return std::nullopt;
  return h;
}

std::string address_text(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
  else if (a->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, buf, sizeof buf);
  return buf;
}

using AddrInfo = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

AddrInfo resolve(const std::string& host, int port, int socktype) {
  addrinfo hints{};
  hints.ai_socktype = socktype;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw Error(fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
  return AddrInfo(res, freeaddrinfo);
}

}  // namespace

void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

PortHold hold_port(int first, bool fixed) {
  for (int p = first; p < first + (fixed ? 1 : 200) && p < 65536; ++p)
    if (auto h = try_hold(p)) return std::move(*h);
  if (fixed) return PortHold{common::Fd(), common::Fd(), first};
  if (auto h = try_hold(0)) return std::move(*h);
  throw Error(fmt::format("no rendezvous port could be held from {} on", first));
}

Route route_to(const std::string& host) {
  AddrInfo res = resolve(host, 9, SOCK_DGRAM);
  const addrinfo* ai = res.get();
  common::Fd s(socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  // A UDP connect sends nothing: it only asks the kernel for the route and source address.
  if (!s || connect(s.get(), ai->ai_addr, ai->ai_addrlen) != 0)
    throw Error(
        fmt::format("no route to {} ({}): {}", host, address_text(ai->ai_addr), strerror(errno)));
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  getsockname(s.get(), reinterpret_cast<sockaddr*>(&local), &len);
  Route r{"", address_text(reinterpret_cast<sockaddr*>(&local)), address_text(ai->ai_addr)};
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == local.ss_family &&
          address_text(i->ifa_addr) == r.local_addr) {
        r.iface = i->ifa_name;
        break;
      }
    freeifaddrs(ifs);
  }
  if (r.iface.empty())
    throw Error(
        fmt::format("no interface holds {}, the address that routes to {}", r.local_addr, host));
  return r;
}

std::string try_connect(const std::string& host, int port, double timeout_s) {
  AddrInfo res(nullptr, freeaddrinfo);
  try {
    res = resolve(host, port, SOCK_STREAM);
  } catch (const Error& e) {
    return e.what();
  }
  std::string why = "no address";
  for (addrinfo* ai = res.get(); ai; ai = ai->ai_next) {
    common::Fd s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) continue;
    if (connect(s.get(), ai->ai_addr, ai->ai_addrlen) == 0) return "";
    if (errno != EINPROGRESS) {
      why = strerror(errno);
      continue;
    }
    pollfd p{s.get(), POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) {
      why = fmt::format("no answer within {:.0f} s", timeout_s);
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) return "";
    why = strerror(err);
  }
  return why;
}

common::Fd connect_tcp(const std::string& host, const std::string& port, double timeout_s,
                       const std::string& who) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    throw Error(
        fmt::format("{}: cannot resolve gpurun's host '{}': {} (is it in /etc/hosts on this "
                    "node? gpurun --control-addr sets another name)",
                    who, host, gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(res, freeaddrinfo);
  std::string why;
  double deadline = proc::now_seconds() + timeout_s;
  while (true) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      common::Fd s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!s) continue;
      if (connect(s.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
        no_delay(s.get());
        return s;
      }
      why = strerror(errno);
    }
    if (proc::now_seconds() >= deadline) break;
    usleep(200000);
  }
  throw Error(
      fmt::format("{}: cannot reach gpurun at {}:{}: {} (a firewall between nodes? gpurun "
                  "--control-addr sets the address ranks use)",
                  who, host, port, why));
}

}  // namespace gpurun::launcher::net

// net.cc: see net.h.
#include "net.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "gpurun/launcher/error.h"
#include "proc_util.h"

namespace gpurun::launcher::net {

Listener listen_tcp(bool loopback, const std::string& what) {
  Listener l;
  l.fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!l.fd) throw Error(fmt::format("{}: socket: {}", what, strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
  a.sin_port = 0;
  if (bind(l.fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(l.fd.get(), 4096) != 0)
    throw Error(fmt::format("{}: {}", what, strerror(errno)));
  socklen_t len = sizeof a;
  if (getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw Error(fmt::format("{}: getsockname: {}", what, strerror(errno)));
  l.port = ntohs(a.sin_port);
  return l;
}

bool port_free(int port) {
  common::Fd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
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
      if (connect(s.get(), ai->ai_addr, ai->ai_addrlen) == 0) return s;
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

// net.h: the sockets of a launch: gpurun's control listener, a wrapper's connection to it, the
// rendezvous port held on rank 0's host, the route to it and the check that it is reached. Every
// socket is an owned common::Fd. Private.
#pragma once

#include <string>
#include <vector>

#include "gpurun/common/posix.h"

namespace gpurun::launcher::net {

// A listening TCP socket (non-blocking, close-on-exec) on an ephemeral port of the loopback or
// every address; throws Error naming `what`.
struct Listener {
  common::Fd fd;
  int port = 0;
};
Listener listen_tcp(bool loopback, const std::string& what);

// TCP_NODELAY: control messages are small and each one is awaited (no Nagle delay).
void no_delay(int fd);

// The rendezvous port, held on rank 0's host from before any program starts until rank 0's
// wrapper ends, so nothing else can take it in between. `holder` is bound with SO_REUSEADDR and
// never listens: the program can still bind and listen on the port with SO_REUSEADDR (PyTorch's
// TCPStore does), while a plain bind or an ephemeral port pick cannot take it. `probe` listens on
// the same port until the program starts, so every rank can check that it reaches this host.
struct PortHold {
  common::Fd holder, probe;
  int port = 0;
};
// `first`, or (unless `fixed`) the first port from it that can be held, else one the kernel
// picks; with `fixed` and `first` taken, holds nothing (port = first, no fds).
PortHold hold_port(int first, bool fixed);

// How this node reaches `host`: the local interface and address the kernel routes through.
struct Route {
  std::string iface;  // "lo" for this host
  std::string local_addr, remote_addr;
};
// Throws Error saying why (no such host, no route).
Route route_to(const std::string& host);

// One TCP connection to host:port within `timeout_s`; "" when it connected, else why not.
std::string try_connect(const std::string& host, int port, double timeout_s);

// Connects to host:port, retrying until `timeout_s` passes (gpurun may still be starting);
// throws Error naming `who` (e.g. "rank 3 on node2") and the address.
common::Fd connect_tcp(const std::string& host, const std::string& port, double timeout_s,
                       const std::string& who);

}  // namespace gpurun::launcher::net

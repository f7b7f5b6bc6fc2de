// net.h: the sockets of a launch: gpurun's control listener, a wrapper's connection to it, and
// the probe for a free rendezvous port. Every socket is an owned common::Fd. Private.
#pragma once

#include <string>

#include "gpurun/common/posix.h"

namespace gpurun::launcher::net {

// A listening TCP socket (non-blocking, close-on-exec) on an ephemeral port of the loopback or
// every address; throws Error naming `what`.
struct Listener {
  common::Fd fd;
  int port = 0;
};
Listener listen_tcp(bool loopback, const std::string& what);

// True when nothing on this host holds `port` (a bind to it succeeds).
bool port_free(int port);

// Connects to host:port, retrying until `timeout_s` passes (gpurun may still be starting);
// throws Error naming `who` (e.g. "rank 3 on node2") and the address.
common::Fd connect_tcp(const std::string& host, const std::string& port, double timeout_s,
                       const std::string& who);

}  // namespace gpurun::launcher::net

// relay.h: a node's control relay (control.h, "Relays"): one TCP connection to gpurun for all of
// a node's ranks, so gpurun holds O(nodes) connections (131,072 ranks on 16,384 nodes stay below
// a login node's 20,000 open files).
//
// The node's first wrapper to bind the abstract Unix socket control::relay_socket_name(token,
// node) forks the relay; every wrapper of the node (that one included) then talks to it over
// that socket exactly as it would to gpurun. The relay adds each line's rank on the way up and
// takes it off on the way down. It ignores the signals a wrapper forwards (a Ctrl-C reaches the
// whole process group: the wrappers pass it on, and still need the relay to report the ends),
// dies with the wrapper that forked it (PR_SET_PDEATHSIG), and ends when gpurun closes its
// connection, or when every rank it carried has gone and, for kIdleEnd, none came. Whoever forked
// it waits for it before ending, so an engine that ends a task's leftovers with the task does not
// cut off the node's other ranks. Private to the gpurun binary.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "gpurun/common/posix.h"

namespace gpurun::launcher::relay {

// Where the relay connects, and what it says there.
struct Target {
  std::string host, port, token;  // gpurun's control address (--control), and the attempt
  std::string node;               // this node's name in the plan
  int local_ranks = 0;            // the plan's ranks on this node
};

struct Joined {
  common::Fd fd;      // this wrapper's connection to the relay
  pid_t forked = -1;  // the relay, when this wrapper forked it (else -1)
};

// Connects to the node's relay, forking it first when there is none yet; retries until
// `timeout_s` (another wrapper may be between bind and listen). nullopt when Unix sockets cannot
// be used here (the caller then connects to gpurun itself); throws Error when the relay cannot
// be forked or reached in time.
std::optional<Joined> join(const Target& t, double timeout_s);

// Waits for a relay this wrapper forked to end (EINTR retried).
void wait_for(pid_t relay);

}  // namespace gpurun::launcher::relay

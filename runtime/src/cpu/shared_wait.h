// shared_wait.h (private): the shared-memory exchange's waits, bounded. The ranks of a node meet
// on counters in node-shared memory that only grow; a wait spins, then yields, and after the
// exchange's timeout throws SharedWaitTimeout naming the step, what it waited for and the ranks
// that are behind (fewest arrivals), with their pids: a peer that is stopped (SIGSTOP, a
// debugger), stuck or dead is named instead of hanging the node's ranks forever.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gpurun::runtime::cpu {

// A counter alone on its cache line; it lives in memory other processes map, so it must not
// need a lock.
struct alignas(64) Counter {
  std::atomic<std::uint64_t> n{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "the exchange's counters are shared between processes");

// One per rank, in the shared block: how many times its members arrived anywhere, and its pid.
struct alignas(64) RankArrivals {
  std::atomic<std::uint64_t> arrivals{0};
  std::atomic<std::int64_t> pid{0};
};

class SharedWaitTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// This rank's side of the waits. `progress` holds `ranks` slots (zeroed by rank 0 before any
// arrival); the constructor records this process's pid in its rank's slot.
class SharedWaits {
 public:
  SharedWaits(RankArrivals* progress, int rank, int ranks, double timeout_s);

  // One of this rank's members arrives on c.
  void arrive(Counter& c) const;
  // Until c reaches target; throws SharedWaitTimeout after the timeout. `what` names the
  // meeting ("the small gradients of every rank"), `step` the exchange's step (0-based).
  void wait(const Counter& c, std::uint64_t target, const char* what, std::uint64_t step) const;

  // The ranks with the fewest arrivals, "rank 1 (pid 4242, 17 arrivals; the others 19)", or a
  // sentence saying none is behind (then a thread of a rank is the one stuck).
  std::string behind() const;

 private:
  RankArrivals* progress_;
  int rank_, ranks_;
  double timeout_s_;
};

}  // namespace gpurun::runtime::cpu

// group_errors.cc: agree_on_errors and run_agreed (process_group.h): an error some ranks hit
// becomes the same GroupError on every rank, over the group's own collectives, so that a program
// can say it once and every rank can end normally.
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "gpurun/common/posix.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime {

void agree_on_errors(ProcessGroup& pg, const std::string& error) {
  const int world = pg.size(), rank = pg.rank();
  // Which ranks failed: one slot per rank, summed.
  std::vector<double> failed(std::size_t(world), 0.0);
  if (!error.empty()) failed[std::size_t(rank)] = 1.0;
  pg.allreduce_sum(failed.data(), failed.size());
  int first = -1, count = 0;
  for (int r = 0; r < world; ++r) {
    if (failed[std::size_t(r)] == 0.0) continue;
    if (first < 0) first = r;
    ++count;
  }
  if (count == 0) return;
  // The first failed rank's words, for every rank.
  std::string message;
  if (rank == first) {
    message = count == world ? error
                             : "rank " + std::to_string(rank) + " of " + std::to_string(world) +
                                   " on " + common::hostname() + ": " + error;
  }
  std::uint64_t length = message.size();
  pg.broadcast(&length, sizeof length, first);
  message.resize(std::size_t(length));
  if (length > 0) pg.broadcast(message.data(), std::size_t(length), first);
  if (count > 1 && count < world) {
    message += " (and " + std::to_string(count - 1) + " other rank" + (count > 2 ? "s" : "") + ")";
  }
  throw GroupError(message);
}

void run_agreed(ProcessGroup& pg, const std::function<void()>& part) {
  std::string error;
  try {
    part();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  agree_on_errors(pg, error);
}

}  // namespace gpurun::runtime

// rank_folder.h: how a rank tells gpurun it makes progress, and the per-rank folder the wrapper
// keeps for it.
//
// The GPURUN_HEARTBEAT contract (shared with the runtime; examples/mnist_cnn beats once a step):
//   - The wrapper creates a regular file per rank and sets GPURUN_HEARTBEAT=<absolute path of that
//     file> in the rank's environment.
//   - The rank writes its step number as decimal ASCII at offset 0 of that file, optionally
//     followed by spaces or a newline (the wrapper also accepts leading spaces) (it may pwrite a
//     fixed-width field, or truncate and write), as often as it likes.
//   - The wrapper reads it about once a second; a changed number is progress. A program that
//     never writes the file makes progress by writing output (stdout or stderr).
// With --hang-timeout S, gpurun calls the job hung when no rank progresses for S seconds, or when
// one rank's step stays behind the others' for S seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sys/proc_util.h"

namespace gpurun::launcher {

// The step in a heartbeat file's contents; nullopt when it holds no number yet (empty, torn by
// a concurrent truncate-and-write) or something else.
std::optional<std::int64_t> parse_heartbeat(std::string_view contents);

// A rank's private folder under `tmpdir` (gpurun-HOST-pPID.START-rankN-XXXXXX, START the
// wrapper's start time in clock ticks), removed with its owner, or by the next wrapper on the host
// once its owner is gone (no process with that pid and start time): the heartbeat file, the
// sitecustomize.py that registers faulthandler (stacks.h), and where Python tracebacks land.
class RankDir {
 public:
  RankDir() = default;
  // Throws Error naming `tmpdir` when it cannot be created.
  static RankDir create(const std::string& tmpdir, int rank);

  const std::string& path() const { return dir_.path(); }
  std::string heartbeat() const { return path() + "/heartbeat"; }
  std::string python_dir() const { return path() + "/python"; }  // prepended to PYTHONPATH
  std::string pystack_dir() const { return path() + "/pystacks"; }
  // The step the rank last wrote, if any.
  std::optional<std::int64_t> read_step() const;

 private:
  proc::TempDir dir_;  // removed with all it holds when the RankDir goes
};

}  // namespace gpurun::launcher

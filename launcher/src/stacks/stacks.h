// stacks.h: the stacks of a hung rank, and where each rank is.
//
// The wrapper collects them (collect_stacks): every thread of every process in the program's
// process group, through eu-stack (elfutils; fast) or gdb, and for Python processes their
// tracebacks, which faulthandler writes on SIGURG when the wrapper's sitecustomize registered it
// (python_shim()). gpurun reads each rank's text back (where()) and groups ranks by the place
// they are stuck in (hang_summary()): "ranks 0,2-3 in MPI_Allreduce; rank 1 in raise: it is
// behind". Private.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "gpurun/launcher/allocation.h"

namespace gpurun::launcher::stacks {

// The signal that asks a Python rank for its tracebacks: ignored by default, so a program that
// did not register it is not disturbed.
constexpr int kPythonSignal = 23;  // SIGURG

// sitecustomize.py that registers faulthandler for kPythonSignal (writing to
// $GPURUN_PYSTACK_DIR/py-PID.txt), then runs the sitecustomize it shadows, if any.
std::string python_shim();

// The command that prints every thread's stack of `pid` with `tool` (a path to eu-stack or gdb).
std::vector<std::string> tool_command(const std::string& tool, pid_t pid);

// Every stack of the processes in process group `pgid` (leader first), plus the Python
// tracebacks found in `pystack_dir`; bounded by `timeout_s` in all. `env` gives PATH for the tool.
std::string collect_stacks(const Env& env, pid_t pgid, const std::string& pystack_dir,
                           double timeout_s);

// Where a rank is, from collect_stacks' text: the outermost MPI/NCCL/CUDA call of the main
// thread if any ("MPI_Allreduce"), else the main Python thread's innermost frame in the user's
// own files (not site-packages, dist-packages or the standard library: "train.py:42 in step",
// not torch's autograd), or its innermost frame when it has none of the user's,
// else the innermost named native frame ("clock_nanosleep"); "unknown" when nothing parses.
std::string where(std::string_view stacks_text);

struct RankWhere {
  int rank;
  std::string where;
  bool behind;  // its step is behind the others'
};
// "ranks 0,2-3 in MPI_Allreduce; rank 1 in raise: it is behind" (groups in order of first rank).
std::string hang_summary(const std::vector<RankWhere>& ranks);
// "0,2-4,7" for {0,2,3,4,7}.
std::string rank_list(const std::vector<int>& sorted_ranks);

}  // namespace gpurun::launcher::stacks

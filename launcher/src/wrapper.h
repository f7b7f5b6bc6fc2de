// wrapper.h: `gpurun _rank`, run by the engine once per rank, as an object with one handler per
// event: a signal, a message from gpurun, gpurun going away, a deadline, the program's exit.
//
// It learns its global rank from the engine (OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID,
// JSM_NAMESPACE_RANK, PMI_RANK, PBS_VNODENUM, or GPURUN_RANK from gpurun's own fork), checks the
// engine placed it where the plan says, gives it its GPUs from this node's visible list, starts
// the program in its own process group, and reports to gpurun (control.h). If gpurun goes away,
// the program is stopped too: no orphan keeps a GPU. Private to the gpurun binary.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "control.h"
#include "gpurun/common/posix.h"
#include "gpurun/launcher/launch.h"
#include "proc_util.h"

namespace gpurun::launcher {

// `gpurun _rank --plan P --control C -- PROGRAM ARGS`
struct WrapperArgs {
  std::string plan_text;
  std::string control = "none";  // host:port:token, or none
  std::vector<std::string> program;
};
WrapperArgs parse_wrapper_args(const std::vector<std::string>& args);

// Where the engine says this process is: its global rank and, when the engine tells, its local
// rank, with the variables they came from.
struct EngineRank {
  int rank;
  std::string source;
  std::optional<int> local_rank;
  std::string local_source;
};
EngineRank engine_rank(const Env& env);

class RankWrapper {
 public:
  RankWrapper(WrapperArgs args, Env env);
  int run();  // the wrapper's exit status

 private:
  enum class Timer { kill };

  void locate();
  void connect();
  void start_program();
  void on_signal(int sig);
  void on_control_readable();
  void on_message(const control::Stop&);
  void on_message(const control::Signal& m);
  void on_control_closed();
  void on_timer(Timer t);
  void stop_program();
  void report(const control::ToSupervisor& m);
  int finish();

  WrapperArgs args_;
  Env env_;
  DecodedPlan plan_;
  RankEntry me_;
  common::Fd control_;
  proc::LineReader control_in_;
  std::string token_;
  std::optional<proc::SignalPipe> signals_;
  proc::Child child_;
  std::optional<int> exec_failure_;  // 127/126 when the program could not be started
  proc::Deadlines<Timer> timers_;
  double started_ = 0;
};

}  // namespace gpurun::launcher

// run.h: running a launch for real. The supervisor (gpurun itself, supervisor.h) starts the
// engine, listens on a control socket where every rank's wrapper (`gpurun _rank`, wrapper.h)
// reports (control.h), forwards signals, and ends the whole job when one rank fails. Private.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/launch.h"
#include "gpurun/launcher/plan.h"
#include "supervisor/preflight.h"

namespace gpurun::launcher {

struct RunConfig {
  Allocation alloc;
  RankPlan plan;
  PlanOptions plan_options;
  LaunchOptions launch;
  Env env;                          // gpurun's own environment
  double start_timeout = 300;       // every rank must report within this
  double kill_grace = 5;            // TERM -> KILL when stopping after a failure
  double stop_timeout = 25;         // after forwarding SIGINT/SIGTERM, before stopping hard
  std::optional<double> time_left;  // --time-left, else from the allocation's end time
  double checkpoint_before = 0;     // seconds before the end to send checkpoint_signal
  int checkpoint_signal = 10;       // SIGUSR1
  std::optional<std::string> control_addr;
  bool quiet = false;
  // --requeue: after a checkpoint signal (SIGUSR1/SIGUSR2 to gpurun, or --checkpoint-before) and
  // a clean exit of every rank, put the job back in the scheduler's queue so it resumes.
  bool requeue = false;
  // --hang-timeout: seconds without progress (or with one rank's step behind) that make a hang;
  // 0 turns hang detection off.
  double hang_timeout = 0;
  int max_restarts = 0;                   // --max-restarts: attempts after the first
  std::optional<std::string> output_dir;  // --output-dir: rank-N.out/.err, and stacks of a hang
  std::string cpu_bind = "none";          // --cpu-bind auto|none|LIST
  // --monitor[=SECONDS] FILE.csv: every node's GPUs sampled into this file (monitor.h).
  std::optional<std::string> monitor_file;
  double monitor_interval = 1;
  // --preflight: each node's local rank 0 checks the node before any program starts (its GPUs,
  // TMPDIR's free space; wrapper/node_checks.h); a failing node refuses GO (fail) or is named
  // (warn). --preflight-min-tmp in bytes (0: not checked); --preflight-bandwidth also times an
  // exchange with rank 0's node.
  PreflightMode preflight = PreflightMode::fail;
  std::uint64_t preflight_min_tmp = std::uint64_t{1} << 30;
  bool preflight_bandwidth = false;
};

int run_supervisor(RunConfig& cfg);
// `gpurun _rank --plan P --control C -- PROGRAM ARGS`
int run_rank_wrapper(const std::vector<std::string>& args);
// Inside an srun/jsrun task: set the rank environment and exec the program, in `container`'s
// image when given (never returns on success).
int exec_in_step(const Allocation& alloc, const RankPlan& plan, const Env& env,
                 const std::vector<std::string>& program,
                 const std::optional<ContainerSpec>& container);

}  // namespace gpurun::launcher

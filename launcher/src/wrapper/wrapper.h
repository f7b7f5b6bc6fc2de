// wrapper.h: `gpurun _rank`, run by the engine once per rank, as an object with one handler per
// event: a signal, a message from gpurun, gpurun going away, output of the program, a reach
// check on rank 0's port, a deadline, the program's exit.
//
// It learns its global rank from the engine (OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID,
// JSM_NAMESPACE_RANK, PMI_RANK, PBS_VNODENUM, or GPURUN_RANK from gpurun's own fork), checks the
// engine placed it where the plan says, and gives it its GPUs from this node's visible list (all
// it sees, when srun bound the task to its own GPUs; an error here is reported as the rank's
// failure once connected). Then,
// talking to gpurun (control.h): HELLO; rank 0 holds the rendezvous port (BIND/PORT); every rank
// checks it reaches rank 0's host and picks the interface that routes there (RENDEZVOUS/REACH),
// each node's local rank 0 having first checked its node under --preflight (PREFLIGHT);
// once all did, GO starts the program in its own process group, its output forwarded as whole
// lines, its heartbeat watched; EXIT at the end. If gpurun goes away, the program is stopped
// too: no orphan keeps a GPU. The wrapper is a child subreaper: what the program leaves running
// outside its group (a `setsid` daemon, a double fork) becomes the wrapper's child and is killed
// when the program ends, as Slurm's process tracking ends a task's leftovers. Private to the
// gpurun binary.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/control.h"
#include "gpurun/common/posix.h"
#include "gpurun/launcher/launch.h"
#include "wrapper/node_checks.h"
#include "wrapper/rank_folder.h"
#include "monitor/monitor.h"
#include "sys/net.h"
#include "supervisor/output.h"
#include "sys/proc_util.h"
#include "control/rank_table.h"

namespace gpurun::launcher {

// `gpurun _rank --plan P --control C [--path P] [--ld-library-path L] -- PROGRAM ARGS`
struct WrapperArgs {
  std::string plan_text;
  std::string control = "none";  // host:port:token, or none
  // --path, --ld-library-path: gpurun's values, the program's ("" for the latter: unset).
  std::optional<std::string> path, ld_library_path;
  std::vector<std::string> program;
  std::optional<ContainerSpec> container;  // --container-runtime R --container IMAGE
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
  enum class Timer { kill, reach, heartbeat, flush };

  // Setting up, running, ending (rank_wrapper.cc).
  void identify();
  void locate();
  void setup();
  void connect();
  bool join_relay(const std::string& host, const std::string& port);
  bool finished() const;
  void wait_and_dispatch();
  void drain_output(double deadline);
  void end_leftovers();
  void end_orphans();
  bool await_bye(double deadline);
  int finish();

  // Handlers (wrapper_events.cc).
  void on_signal(int sig);
  void on_control_readable();
  void on_message(const control::Bind& m);
  void on_message(const control::Rendezvous& m);
  void on_message(const control::Go& m);
  void on_message(const control::Stop&);
  void on_message(const control::Signal& m);
  void on_message(const control::DumpStacks&);
  void on_message(const control::Bye&);
  void on_control_closed();
  void on_probe();
  void on_output(int stream);
  void on_timer(Timer t);
  void check_reach();
  std::string hold_tf_port();

  // --preflight (wrapper_preflight.cc).
  int serve_bandwidth();
  void run_preflight(const control::Rendezvous& m);
  void stop_program();
  void report(const control::ToSupervisor& m);
  enum class Line { kWhole, kPartial };  // whole lines, or the start of an unfinished one
  void forward(int stream, Line line, const std::string& text);

  // The program (wrapper_program.cc).
  void start_program(const control::Go& go);
  void program_environment(const control::Go& go);
  std::vector<int> cpu_binding(const std::string& spec) const;
  std::vector<std::string> program_argv() const;
  void beat();
  void start_monitor(int interval_ms);
  void report_monitor();

  WrapperArgs args_;
  Env env_;
  RankTable plan_;
  EngineRank engine_;
  RankEntry me_;
  std::vector<std::string> visible_;    // this node's GPUs, as CUDA names them
  std::vector<std::string> rank_keys_;  // rank_environment()'s and start_environment()'s
  common::Fd control_;                  // to gpurun, or to the node's relay (relay.h)
  pid_t relay_ = -1;  // the node's relay, when this wrapper forked it: waited for at the end
  bool relayed_ = false;  // talks to gpurun through its node's relay
  proc::LineReader control_in_;
  std::string token_;
  std::optional<proc::SignalPipe> signals_;
  proc::Deadlines<Timer> timers_;

  net::PortHold port_;  // rank 0: the rendezvous port, held until this wrapper ends
  // With --contract tf: this rank's TF_CONFIG worker port, held as port_ is (bound with
  // SO_REUSEADDR, never listening: TensorFlow's gRPC server binds it with SO_REUSEADDR, a plain
  // bind or an ephemeral pick cannot), from the rendezvous until this wrapper ends.
  net::PortHold tf_port_;
  int master_port_ = 0;
  bool check_reachable_ = false;
  std::string iface_, reach_error_;
  bool preflight_done_ = false;
  std::unique_ptr<node_checks::BandwidthServer> bandwidth_;  // rank 0, until GO

  std::optional<RankDir> dir_;
  proc::Child child_;
  std::array<common::Fd, 2> out_;  // the program's stdout and stderr
  std::array<LineForwarder, 2> fwd_;
  bool watch_ = false, output_since_beat_ = false;
  std::optional<std::int64_t> step_;
  bool started_program_ = false, bye_ = false;
  bool exit_sent_ = false;  // finish() reported EXIT: only BYE is read from then on
  int abort_signal_ = 0;  // a stop before the program started
  std::optional<control::Exit> exec_failure_;
  std::optional<monitor::NodeSampler> monitor_;  // --monitor, on local rank 0
  double started_ = 0;
  std::optional<double> signalled_at_;  // when the program's group was last signalled or stopped
};

}  // namespace gpurun::launcher

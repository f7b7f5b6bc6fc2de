// supervisor.h: gpurun's side of a launch, as an object with one handler per event: a signal to
// gpurun, a connection or message from a rank's wrapper, a deadline, the engine's exit.
//
// A launch is one or more attempts (--max-restarts). In each, gpurun starts the engine, every
// wrapper says HELLO, rank 0's holds the rendezvous port, every rank checks it reaches rank 0's
// host (with --preflight each node's local rank 0 first checks its node, and a failing node
// refuses GO), and GO starts all programs at once (control.h). Fail-fast: the first rank that exits
// non-zero, is killed, or whose wrapper vanishes ends the attempt: every other wrapper gets STOP
// (TERM, KILL after --kill-grace) and the engine TERM, then KILL after --kill-grace. If every rank
// had started and restarts are left, the next attempt starts; else gpurun prints one line naming
// that rank and exits with its status. --hang-timeout: when ranks stop making progress, every
// rank's stacks are collected, summarized and written, and the job stops with kHangStatus.
// What an attempt's events mean for its ranks, its failure and its hang is Attempt's (attempt.h);
// the Supervisor does the talking, the processes and the timers. Private to the gpurun binary.
#pragma once

#include <sys/epoll.h>
#include <sys/types.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "cli/run.h"
#include "control/control.h"
#include "gpurun/common/posix.h"
#include "gpurun/launcher/launch.h"
#include "monitor/monitor.h"
#include "supervisor/attempt.h"
#include "supervisor/node_loss.h"
#include "supervisor/output.h"
#include "sys/net.h"
#include "sys/proc_util.h"

namespace gpurun::launcher {

constexpr int kHangStatus = 124;  // gpurun's exit status after a hang (as timeout(1)'s)

class Supervisor {
 public:
  explicit Supervisor(RunConfig& cfg);
  // Runs every attempt until the job is done; gpurun's exit status.
  int run();

 private:
  enum class Timer {
    start,
    checkpoint,
    stop_after_signal,
    engine_term,
    engine_kill,
    drain,
    hang_check,
    stacks,
    pending_signals
  };
  // A wrapper's own connection (one rank), or a node relay's (the node's ranks; control.h).
  struct Conn {
    common::Fd fd;
    proc::LineReader in;
    int rank = -1;           // a wrapper's: -1 until its HELLO arrives
    bool relay = false;      // a relay's, once its RELAY arrived
    std::vector<int> ranks;  // a relay's: the ranks whose HELLO came through it
    std::string host;        // a relay's node
    std::string out;         // what this wake sends it (flush_sends: one write a connection)
  };
  // Where a message came from: its connection (an index in conns_) and its rank (-1 before
  // HELLO). Handlers answer through it: send() frames the answer for a relay.
  struct From {
    std::size_t conn;
    int rank;
  };

  // Before and between attempts (supervisor_start.cc).
  void check_program();
  void open_control();
  void begin_attempt();
  void start_engine();
  void private_mpi_session(Env& env);  // engine's environment, single-machine mpirun
  void arm_checkpoint_timer();
  bool should_restart();

  // --nnodes MIN:MAX (supervisor_nodes.cc): leaving nodes out of the next attempt.
  bool restart_without_preflight_failures();
  bool leave_out(const std::vector<LeftOut>& nodes);
  void report_left_out() const;

  // The loop and its events (supervisor.cc).
  bool attempt_done();
  void wait_and_dispatch();
  void on_signal(int sig);
  bool signal_before_start(int sig);
  void hold_signal(int sig, const std::string& what);
  void send_pending_signals();
  void on_child_exit(pid_t pid, int status);
  // Connections, direct and relayed (supervisor_conns.cc).
  void on_connect();
  void on_readable(std::size_t ci);
  bool on_line(std::size_t ci, std::string_view line);
  bool on_relay_line(std::size_t ci, std::string_view line);
  bool dispatch(const From& f, std::string_view line);
  void on_disconnect(std::size_t ci);
  void on_rank_closed(const From& f, const std::string& why);
  void drop(Conn& c);
  void ready_conns(std::vector<std::size_t>& out);
  void send(const From& f, const control::ToWrapper& m);
  void broadcast(const control::ToWrapper& m);
  void queue(std::size_t ci, std::string_view bytes);
  void flush_sends();

  void on_message(const From& c, const control::Hello& m);
  void on_message(const From& c, const control::RelayHello& m);
  void on_message(const From& c, const control::Port& m);
  void on_message(const From& c, const control::Reach& m);
  void on_message(const From& c, const control::Preflight& m);
  void on_message(const From& c, const control::Running& m);
  void on_message(const From& c, const control::StepReport& m);
  void on_message(const From& c, const control::Output& m);
  void on_abort(int rank, int errorcode);
  void on_message(const From& c, const control::Stacks& m);
  void on_message(const From& c, const control::GpuSamples& m);
  void on_message(const From& c, const control::GpuSamplesFailed& m);
  void on_message(const From& c, const control::Exit& m);
  bool user_stop(int rank, const control::Exit& m);
  int user_stop_result();
  void on_timer(Timer t);
  void on_start_timeout();
  void on_engine_output(int stream);
  void drain_engine_output();

  // What the handlers do.
  void begin_stop(const std::string& why);
  void record_failure(int rank, const std::string& what, int status, double secs);
  void say(const std::string& msg) const;   // a status line (not with --quiet)
  void tell(const std::string& msg) const;  // a failure, hang or restart: always
  bool engine_done() const;

  // Hangs (supervisor_hang.cc).
  void check_hang();
  void begin_hang(const std::string& why);
  void finish_hang();
  std::optional<std::string> hang_dir() const;
  bool write_stack_file(const std::string& dir, int rank, const Attempt::Rank& r) const;

  // --preflight (supervisor_preflight.cc).
  void expect_preflight();
  control::Rendezvous rendezvous() const;
  void report_preflight();
  void preflight_timeout_lines();
  void send_go();

  // --monitor's lines at the end (supervisor_monitor.cc).
  void monitor_summary();
  // Records `what` in monitor_failures_; false when it was already there (said before).
  bool first_monitor_failure(const std::string& what);

  // The end: gpurun's exit status, and --requeue (supervisor_start.cc).
  int result();
  int requeue_after_checkpoint();

  RunConfig& cfg_;
  int world_;  // this attempt's ranks: --nnodes may leave nodes out of the next one
  const bool single_machine_;
  net::Listener control_;
  std::string control_host_;
  std::optional<proc::SignalPipe> signals_;
  std::optional<proc::TempFile> hostfile_;
  std::optional<proc::TempDir> mpi_session_;  // private_mpi_session()
  std::optional<OutputSink> output_;
  std::optional<monitor::MonitorLog> monitor_;         // --monitor; reset if writing it fails
  static constexpr std::size_t kMaxMonitorLines = 64;  // of monitor_failures_
  std::vector<std::string> monitor_failures_;          // what nodes said, each said once
  std::vector<std::string> monitor_silent_;            // nodes that could not be sampled
  int restarts_ = 0;
  int attempts_ = 0;  // begun so far (--output-dir's '==> attempt K <==')
  // --nnodes: the nodes left out so far, and those the preflight just failed (left out before
  // the next attempt, which does not count as a restart: no program ran); the first plan's size.
  std::vector<LeftOut> left_out_, preflight_left_out_;
  int first_world_ = 0;
  std::size_t first_nodes_ = 0;
  int forwarded_stop_signal_ = 0;
  // Ranks that ended after the user's stop (INT/TERM/HUP to gpurun, or a rank's own SIGINT from
  // the terminal): by the signal, and otherwise ("rank 1 exited with code 1"). Not failures.
  int ended_by_stop_ = 0;
  std::vector<std::string> ended_otherwise_;
  int checkpoint_signal_sent_ = 0;    // USR1/USR2 forwarded, or the --checkpoint-before signal
  std::vector<int> pending_signals_;  // USR1/USR2 that came before every rank's program ran
  double checkpoint_at_ = 0;          // when --checkpoint-before signals the ranks (0: never)
  double job_t0_ = 0;

  // One attempt's state (begin_attempt() resets it).
  std::string token_;
  LaunchCommand cmd_;
  std::vector<proc::Child> children_;  // the engine, or one wrapper per rank (Engine::fork)
  // The engine's own stdout/stderr (ranks' output comes through their wrappers): passed on by
  // line, except the banners it prints about ranks gpurun has already stopped.
  std::array<common::Fd, 2> engine_out_;
  std::array<LineForwarder, 2> engine_lines_;
  std::array<bool, 2> in_banner_{}, drop_banner_{};
  std::vector<Conn> conns_;
  common::Fd conn_events_;           // an epoll set of conns_ (data: the index): O(ready) a wake
  std::vector<int> conn_of_rank_;    // each rank's index in conns_, -1 before its HELLO
  std::vector<std::size_t> unsent_;  // conns_ with something in `out`
  std::vector<epoll_event> ready_;   // epoll_wait's answer (kept: a wake allocates nothing)
  std::vector<std::size_t> ready_conns_;  // their indices in conns_
  Attempt attempt_;
  proc::Deadlines<Timer> timers_;
  std::optional<int> port_;  // the rendezvous port rank 0 holds
  bool port_checkable_ = true;
  int bw_port_ = 0;  // where rank 0's wrapper serves --preflight-bandwidth (0: it does not)
  double t0_ = 0;
};

}  // namespace gpurun::launcher

// supervisor.h: gpurun's side of a launch, as an object with one handler per event: a signal to
// gpurun, a connection or message from a rank's wrapper, a deadline, the engine's exit.
//
// Fail-fast: the first rank that exits non-zero, is killed, or whose wrapper vanishes ends the
// job: every other wrapper gets STOP (TERM, KILL after 5 s) and the engine gets TERM, then KILL
// after --kill-grace; gpurun then prints one line naming that rank and exits with its status.
// Private to the gpurun binary.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "control.h"
#include "gpurun/common/posix.h"
#include "gpurun/launcher/launch.h"
#include "net.h"
#include "proc_util.h"
#include "run.h"

namespace gpurun::launcher {

class Supervisor {
 public:
  explicit Supervisor(RunConfig& cfg);
  // Starts the engine, supervises until it and every wrapper are done; gpurun's exit status.
  int run();

 private:
  enum class Timer { start, checkpoint, stop_after_signal, engine_term, engine_kill, drain };
  struct Conn {
    common::Fd fd;
    proc::LineReader in;
    int rank = -1;  // -1 until its HELLO arrives
  };
  struct RankState {
    bool started = false, exited = false;
    std::string host;
  };
  struct Failure {
    int rank;  // -1: the job as a whole (ranks that never started)
    std::string host, what;
    int status;
    double seconds;
  };

  // Setting up (supervisor_start.cc).
  void choose_master_port();
  void open_control();
  void start_engine();
  void arm_checkpoint_timer();

  // The loop and its events.
  bool done();
  void wait_and_dispatch();
  void on_signal(int sig);
  void on_child_exit(pid_t pid, int status);
  void on_connect();
  void on_readable(Conn& c);
  void on_message(Conn& c, const control::Hello& m);
  void on_message(Conn& c, const control::Exit& m);
  void on_disconnect(Conn& c);
  void on_timer(Timer t);

  // What the handlers do.
  void send(Conn& c, const control::ToWrapper& m);
  void broadcast(const control::ToWrapper& m);
  void begin_stop(const std::string& why);
  void record_failure(int rank, const std::string& what, int status, double secs);
  void say(const std::string& msg) const;
  bool engine_done() const;

  // The end: gpurun's exit status, and --requeue (supervisor_start.cc).
  int result();
  int requeue_after_checkpoint();

  RunConfig& cfg_;
  const int world_;
  const bool single_machine_;
  std::string token_;
  net::Listener control_;
  LaunchCommand cmd_;
  std::optional<proc::SignalPipe> signals_;
  std::optional<proc::TempFile> hostfile_;
  std::vector<proc::Child> children_;  // the engine, or one wrapper per rank (Engine::fork)
  std::vector<Conn> conns_;
  std::vector<RankState> ranks_;
  proc::Deadlines<Timer> timers_;
  std::optional<Failure> failure_;
  double t0_ = 0;
  int started_ = 0, stopped_others_ = 0;
  bool stopping_ = false;
  int forwarded_stop_signal_ = 0;
  int checkpoint_signal_sent_ = 0;  // USR1/USR2 forwarded, or the --checkpoint-before signal
};

}  // namespace gpurun::launcher

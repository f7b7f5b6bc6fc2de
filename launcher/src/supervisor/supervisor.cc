// supervisor.cc: the Supervisor's event loop and its handlers (supervisor.h).
#include "supervisor/supervisor.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "gpurun/common/terminal.h"

namespace gpurun::launcher {
namespace {

Attempt::ProgramEnd program_end(const control::Exit& m) {
  return {m.code, m.signal, m.seconds, m.what.value};
}

constexpr double kEngineLinger = 10;           // after a stop, before the engine gets TERM
constexpr double kPendingSignalSettle = 5;     // send_pending_signals

}  // namespace

Supervisor::Supervisor(RunConfig& cfg)
    : cfg_(cfg),
      world_(cfg.plan.world_size),
      single_machine_(cfg.alloc.scheduler == Scheduler::local ||
                      cfg.alloc.scheduler == Scheduler::gpuq),
      first_world_(world_),
      first_nodes_(cfg.plan.nodes.size()),
      attempt_(world_, cfg.hang_timeout) {}

int Supervisor::run() {
  check_program();
  if (cfg_.monitor_file) monitor_.emplace(*cfg_.monitor_file);  // a bad path fails before any rank
  open_control();
  output_.emplace(cfg_.launch.tag_output, cfg_.output_dir, world_);
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the supervisor of running ranks
  signals_.emplace(std::vector<int>{SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGCHLD});
  job_t0_ = proc::now_seconds();
  arm_checkpoint_timer();
  while (true) {
    begin_attempt();
    while (!attempt_done()) wait_and_dispatch();
    drain_engine_output();
    if (!should_restart()) break;
  }
  hostfile_.reset();
  monitor_summary();
  const int status = result();
  report_left_out();
  return status;
}

bool Supervisor::engine_done() const {
  for (const auto& c : children_)
    if (c.running()) return false;
  return true;
}

// Done once the engine has exited and every wrapper's connection closed (or 2 s after the
// engine, for a wrapper whose connection lingers).
bool Supervisor::attempt_done() {
  if (!engine_done()) return false;
  bool open = false;
  for (const auto& c : conns_) open = open || c.fd;
  if (!open) return true;
  if (!timers_.armed(Timer::drain)) timers_.set(Timer::drain, proc::now_seconds() + 2);
  return false;
}

void Supervisor::wait_and_dispatch() {
  std::vector<pollfd> fds{{signals_->fd(), POLLIN, 0},
                          {control_.fd.get(), POLLIN, 0},
                          {engine_out_[0].get(), POLLIN, 0},
                          {engine_out_[1].get(), POLLIN, 0},
                          {conn_events_.get(), POLLIN, 0}};
  poll(fds.data(), fds.size(), timers_.wait_ms(proc::now_seconds(), 1000));

  if (fds[0].revents & POLLIN)
    for (int s : signals_->drain()) on_signal(s);
  if (fds[1].revents & POLLIN) on_connect();
  for (int i = 0; i < 2; ++i)
    if (fds[2 + static_cast<std::size_t>(i)].revents & (POLLIN | POLLHUP)) on_engine_output(i + 1);
  if (fds[4].revents & POLLIN) {
    ready_conns(ready_conns_);
    for (std::size_t ci : ready_conns_) on_readable(ci);
    ready_conns_.clear();
  }
  for (Timer t : timers_.take_due(proc::now_seconds())) on_timer(t);
  flush_sends();
}

void Supervisor::on_signal(int sig) {
  if (sig == SIGCHLD) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) on_child_exit(p, st);
    return;
  }
  if ((sig == SIGINT || sig == SIGTERM) && forwarded_stop_signal_) {
    begin_stop(fmt::format("second {}: stopping all ranks now", common::signal_name(sig)));
    return;
  }
  if (!attempt_.all_running() && !attempt_.stopping() && signal_before_start(sig)) return;
  say(fmt::format("forwarding {} to {} rank{}", common::signal_name(sig), world_,
                  world_ == 1 ? "" : "s"));
  broadcast(control::Signal{sig});
  if (sig == SIGUSR1 || sig == SIGUSR2) checkpoint_signal_sent_ = sig;
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
    forwarded_stop_signal_ = sig;
    timers_.set(Timer::stop_after_signal, proc::now_seconds() + cfg_.stop_timeout);
  }
}

// A signal while the programs are not all running yet: a wrapper that has not connected, or has
// not started its program, would miss it. A stop (INT/TERM/HUP) stops the launch at once, with
// 128 + the signal; a checkpoint signal (USR1/USR2) waits until every program runs and has had
// time to install its handler (send_pending_signals). False for other signals.
bool Supervisor::signal_before_start(int sig) {
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
    forwarded_stop_signal_ = sig;  // the user asked to stop: no restart
    attempt_.fail(-1, "was stopped", 128 + sig, proc::now_seconds() - t0_);
    tell(fmt::format("{} before every rank's program started: stopping the launch",
                     common::signal_name(sig)));
    begin_stop("");
    return true;
  }
  if (sig != SIGUSR1 && sig != SIGUSR2) return false;
  hold_signal(sig, fmt::format("{} before every rank's program started ({} of {})",
                               common::signal_name(sig), attempt_.running_count(), world_));
  return true;
}

// Keeps `sig` for send_pending_signals, and says why (`what`) and when it goes out.
void Supervisor::hold_signal(int sig, const std::string& what) {
  if (std::find(pending_signals_.begin(), pending_signals_.end(), sig) == pending_signals_.end())
    pending_signals_.push_back(sig);
  say(fmt::format("{}: {} goes out {:.0f} s after the last program starts", what,
                  common::signal_name(sig), kPendingSignalSettle));
}

void Supervisor::on_child_exit(pid_t pid, int status) {
  for (auto& c : children_)
    if (c.reaped(pid, status)) return;
}

// A rank's HELLO, on its own connection (c.rank -1) or through its node's relay (c.rank: the
// frame's rank, which must be the HELLO's).
void Supervisor::on_message(const From& c, const control::Hello& m) {
  Conn& conn = conns_[c.conn];
  if (m.token != token_ || (conn.relay && m.rank != c.rank) || !attempt_.on_hello(m.rank, m.host)) {
    if (conn.relay)  // the relay closes that rank's connection
      queue(c.conn, control::frame(c.rank, std::string(control::kClosed) + "\n"));
    else
      drop(conn);  // not one of ours (or of an earlier attempt)
    return;
  }
  const From me{c.conn, m.rank};
  conn_of_rank_[static_cast<std::size_t>(m.rank)] = static_cast<int>(c.conn);
  if (conn.relay)
    conn.ranks.push_back(m.rank);
  else
    conn.rank = m.rank;
  if (attempt_.stopping()) {
    send(me, control::Stop{});
    return;
  }
  if (m.rank == 0) {
    const bool bandwidth = cfg_.preflight != PreflightMode::off && cfg_.preflight_bandwidth &&
                           cfg_.plan.nodes.size() > 1;
    send(me, control::Bind{cfg_.plan.master_port, cfg_.plan_options.master_port ? 1 : 0,
                           bandwidth ? 1 : 0});
  }
  if (port_) send(me, rendezvous());
}

void Supervisor::on_message(const From& c, const control::Port& m) {
  if (c.rank != 0 || port_) return;
  port_ = m.port;
  port_checkable_ = m.probe != 0;
  bw_port_ = m.bw_port;
  if (m.port != cfg_.plan.master_port)
    say(fmt::format("port {} is busy: MASTER_PORT={}", cfg_.plan.master_port, m.port));
  else if (!m.probe)
    say(fmt::format("--master-port {} is taken on {}: ranks start without checking they reach it",
                    m.port, attempt_.rank(0).host));
  broadcast(rendezvous());
}

void Supervisor::on_message(const From& c, const control::Reach& m) {
  std::optional<std::string> error;
  if (!m.ok) error = m.detail.value;
  if (attempt_.on_reach(c.rank, m.iface, std::move(error))) send_go();
}

void Supervisor::send_go() {
  int monitor_ms = cfg_.monitor_file ? static_cast<int>(cfg_.monitor_interval * 1000 + 0.5) : 0;
  broadcast(control::Go{restarts_, cfg_.hang_timeout > 0 ? 1 : 0, cfg_.cpu_bind, monitor_ms});
}

void Supervisor::on_message(const From& c, const control::Running&) {
  if (!attempt_.on_running(c.rank, proc::now_seconds())) return;
  timers_.clear(Timer::start);
  if (cfg_.hang_timeout > 0) timers_.set(Timer::hang_check, proc::now_seconds() + 1);
  if (!pending_signals_.empty())
    timers_.set(Timer::pending_signals, proc::now_seconds() + kPendingSignalSettle);
}

void Supervisor::on_message(const From& c, const control::StepReport& m) {
  attempt_.on_step(c.rank, m.step, proc::now_seconds());
}

// A checkpoint signal that came before the programs ran goes out kPendingSignalSettle after the
// last one started: sooner, a program that has not installed its handler yet would die of it.
void Supervisor::send_pending_signals() {
  if (attempt_.stopping()) return;  // kept for the next attempt (--max-restarts)
  for (int sig : pending_signals_) {
    say(fmt::format("forwarding the {} that came before every rank's program started",
                    common::signal_name(sig)));
    broadcast(control::Signal{sig});
    checkpoint_signal_sent_ = sig;
  }
  pending_signals_.clear();
}

void Supervisor::on_message(const From& c, const control::Output& m) {
  // Without mpirun (srun, the fork) each aborting rank prints Open MPI's MPI_ABORT frame itself:
  // gpurun says it once, in its own line, with this rank as the one that failed.
  std::vector<AbortBanner> aborts;
  std::string shown = m.stream == 2 ? take_abort_banners(m.text.value, aborts) : m.text.value;
  output_->write(c.rank, m.stream, m.partial != 0, m.text.value, shown);
  if (!aborts.empty()) on_abort(c.rank, aborts.front().errorcode);
}

// A rank's program called MPI_Abort: the failure is that (the engine then kills every rank,
// wrappers included, and they would only be 'lost').
void Supervisor::on_abort(int r, int errorcode) {
  if (r < 0 || r >= world_) return;
  record_failure(r, fmt::format("called MPI_Abort (errorcode {})", errorcode),
                 errorcode > 0 && errorcode < 256 ? errorcode : 1, proc::now_seconds() - t0_);
}

void Supervisor::on_message(const From& c, const control::Stacks& m) {
  attempt_.on_stacks(c.rank, m.text.value);
  if (!attempt_.hung() || !timers_.armed(Timer::stacks) || !attempt_.all_stacks_in()) return;
  timers_.clear(Timer::stacks);
  finish_hang();
}

// A rank that ended after the user asked the job to stop, or of a SIGINT (Ctrl-C: a terminal
// sends it to a whole process group) is part of that stop, not a failure; a SIGINT that reached
// a rank alone is passed on to the others as if gpurun had got it. True when `m` was such an end.
bool Supervisor::user_stop(int r, const control::Exit& m) {
  if (!attempt_.ended_by_user_stop(program_end(m), forwarded_stop_signal_)) return false;
  if (!forwarded_stop_signal_) on_signal(SIGINT);
  if (m.signal == forwarded_stop_signal_ || m.signal == SIGINT)
    ++ended_by_stop_;
  else if (m.code != 0 || m.signal != 0)
    ended_otherwise_.push_back(
        fmt::format("rank {} {}", r,
                    m.signal ? fmt::format("was killed by {}", common::signal_name(m.signal))
                             : fmt::format("exited with code {}", m.code)));
  return true;
}

void Supervisor::on_message(const From& c, const control::Exit& m) {
  send(c, control::Bye{});
  if (!attempt_.on_end(c.rank) || user_stop(c.rank, m)) return;
  if (attempt_.fail_by_end(c.rank, program_end(m))) begin_stop("");
}

void Supervisor::on_timer(Timer t) {
  switch (t) {
    case Timer::start:
      on_start_timeout();
      return;
    case Timer::checkpoint:
      checkpoint_at_ = 0;
      // Whatever the signal: it waits, it does not stop.
      if (!attempt_.all_running() && !attempt_.stopping()) {
        hold_signal(cfg_.checkpoint_signal,
                    "job time nearly over before every rank's program started");
        return;
      }
      say(fmt::format("job time nearly over: sending {} to all ranks to checkpoint",
                      common::signal_name(cfg_.checkpoint_signal)));
      broadcast(control::Signal{cfg_.checkpoint_signal});
      checkpoint_signal_sent_ = cfg_.checkpoint_signal;
      checkpoint_at_ = 0;
      return;
    case Timer::stop_after_signal:
      begin_stop(fmt::format("ranks still running {:.0f} s after {}: stopping them",
                             cfg_.stop_timeout, common::signal_name(forwarded_stop_signal_)));
      return;
    case Timer::engine_term:
    case Timer::engine_kill:
      for (const auto& c : children_) c.signal_group(t == Timer::engine_term ? SIGTERM : SIGKILL);
      return;
    case Timer::drain:
      for (auto& c : conns_) drop(c);  // the engine is gone: stop waiting for stragglers
      return;
    case Timer::hang_check:
      check_hang();
      return;
    case Timer::pending_signals:
      send_pending_signals();
      return;
    case Timer::stacks:
      finish_hang();
      return;
  }
}

// Not every program started in time: name the ranks, and why where a rank knows.
void Supervisor::on_start_timeout() {
  if (attempt_.stopping() || attempt_.all_running()) return;
  double now = proc::now_seconds();
  std::string missing;
  int shown = 0, unreachable = 0;
  const int running = attempt_.running_count();
  for (int r = 0; r < world_; ++r) {
    const Attempt::Rank& s = attempt_.rank(r);
    if (s.running) continue;
    if (shown < 8) missing += fmt::format("{}{}", shown++ ? ", " : "", r);
    if (s.started && !s.reached && !s.reach_error.empty() && unreachable++ < 8) {
      // The wrapper's own port (TF_CONFIG's worker port) is no matter of reaching rank 0.
      if (s.reach_error.rfind("TF_CONFIG", 0) == 0)
        tell(fmt::format("rank {} on {}: {}", r, s.host, s.reach_error));
      else
        tell(fmt::format("rank {} on {} cannot reach rank 0's host {} (MASTER_ADDR) on port {} "
                         "through interface {}: {}",
                         r, s.host, cfg_.plan.master_addr, port_.value_or(0), s.iface,
                         s.reach_error));
    }
  }
  preflight_timeout_lines();
  tell(fmt::format("ranks {}{} did not start within {:.0f} s (of {} ranks {} started); stopping",
                   missing, world_ - running > shown ? ", ..." : "", cfg_.start_timeout, world_,
                   running));
  begin_stop("");
  attempt_.fail(-1, "did not start", 1, now - t0_);
}

// A line of the engine's own output. Engines print a framed banner ("-----" lines) when their
// tasks end in a way they dislike, and srun reports the step it was made to end; after gpurun has
// named the failure or begun stopping the ranks, these only repeat it, so they are dropped.
// Everything else passes.
void Supervisor::on_engine_output(int stream) {
  std::size_t i = static_cast<std::size_t>(stream - 1);
  auto bytes = proc::read_some(engine_out_[i]);
  if (!bytes || bytes->empty()) return;
  // mpirun prints an aborting rank's MPI_ABORT frame once (gathering the others' into "N more
  // processes have sent help message"): named in gpurun's own line instead.
  std::vector<AbortBanner> aborts;
  std::string text = take_abort_banners(engine_lines_[i].take_lines(*bytes, 0), aborts);
  for (const auto& a : aborts) on_abort(a.rank, a.errorcode);
  std::string kept;
  std::size_t b = 0;
  while (b < text.size()) {
    std::size_t e = text.find('\n', b) + 1;
    std::string_view line(text.data() + b, e - b);
    bool rule = line.size() > 20 && line.find_first_not_of("-\n") == std::string_view::npos;
    if (rule && !in_banner_[i]) drop_banner_[i] = attempt_.stopping();
    if (!(drop_banner_[i] && (in_banner_[i] || rule)) &&
        !(attempt_.stopping() && is_engine_echo(line)))
      kept.append(line);
    if (rule) in_banner_[i] = !in_banner_[i];
    b = e;
  }
  if (!kept.empty()) common::write_all(stream == 2 ? STDERR_FILENO : STDOUT_FILENO, kept);
}

// What the engine still had to say once it exited (an unfinished last line included).
void Supervisor::drain_engine_output() {
  for (int i = 0; i < 2; ++i) {
    std::size_t k = static_cast<std::size_t>(i);
    while (engine_out_[k]) on_engine_output(i + 1);
    if (auto p = engine_lines_[k].take_partial_now())
      common::write_all(i == 1 ? STDERR_FILENO : STDOUT_FILENO, *p + "\n");
    in_banner_[k] = drop_banner_[k] = false;
  }
}

void Supervisor::begin_stop(const std::string& why) {
  if (!attempt_.begin_stop()) return;
  broadcast(control::Stop{});
  // The wrappers end their programs (KILL after --kill-grace); the engine then sees its tasks gone
  // and exits by itself (mpirun takes 1-3 s to wind down an abort, and may crash when signalled
  // meanwhile). Only an engine that lingers gets TERM and, --kill-grace later, KILL.
  double now = proc::now_seconds();
  // Not before the ranks' own grace is over: a TERM to the engine would cut it short.
  const double linger = std::max(kEngineLinger, cfg_.kill_grace + 2);
  timers_.set(Timer::engine_term, now + linger);
  timers_.set(Timer::engine_kill, now + linger + cfg_.kill_grace);
  if (!why.empty()) say(why);
}

void Supervisor::record_failure(int r, const std::string& what, int status, double secs) {
  if (attempt_.fail(r, what, status, secs)) begin_stop("");
}

void Supervisor::say(const std::string& msg) const {
  if (!cfg_.quiet) tell(msg);
}

// Every status line holds names from the environment or the ranks (hosts, paths, what a rank
// said about its failure): control characters are escaped, so none moves the cursor or forges a
// line.
void Supervisor::tell(const std::string& msg) const {
  fmt::print(stderr, "gpurun: {}\n", common::escape_control(msg));
}

int run_supervisor(RunConfig& cfg) {
  return Supervisor(cfg).run();
}

}  // namespace gpurun::launcher

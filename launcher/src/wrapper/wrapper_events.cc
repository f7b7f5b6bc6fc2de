// wrapper_events.cc: the rank wrapper's handlers (wrapper.h): signals, gpurun's messages, the
// reach check, the program's output, deadlines.
#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stacks/stacks.h"
#include "wrapper/wrapper.h"

namespace gpurun::launcher {
namespace {

constexpr double kReachRetry = 0.5;    // between reach checks
constexpr double kReachAttempt = 1.0;  // one connect's bound
constexpr double kStackTimeout = 6.0;  // for eu-stack/gdb over all the rank's processes

}  // namespace

void RankWrapper::on_signal(int sig) {
  if (sig == SIGCHLD) {
    child_.poll_exit();
  } else if (started_program_) {
    // The program's own process, as torchrun does, not its group: a checkpoint signal would
    // kill a data loader's workers, which do not handle it. A script that starts its python
    // without exec must exec it (or trap and pass the signal on).
    child_.signal(sig);
    signalled_at_ = proc::now_seconds();
  } else if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
    abort_signal_ = sig;  // nothing runs yet: end here
  }
}

void RankWrapper::on_control_readable() {
  std::vector<std::string> lines;
  auto state = control_in_.read_from(control_.get(), lines);
  for (const auto& line : lines) {
    auto m = control::parse_to_wrapper(line);
    // Once this rank's EXIT is out only BYE counts: a RENDEZVOUS or GO crossing it on the wire
    // must not set up or start what already ended (or could not be set up).
    if (m && (!exit_sent_ || std::holds_alternative<control::Bye>(*m)))
      std::visit([&](const auto& msg) { on_message(msg); }, *m);
  }
  if (state != proc::LineReader::State::open) on_control_closed();
}

void RankWrapper::on_message(const control::Bind& m) {
  port_ = net::hold_port(m.port, m.fixed != 0);
  report(control::Port{port_.port, port_.probe ? 1 : 0, m.bandwidth ? serve_bandwidth() : 0});
}

void RankWrapper::on_message(const control::Rendezvous& m) {
  master_port_ = m.port;
  // The port rank 0 holds may be the next free one: MASTER_PORT moves, and with it the variables
  // derived from it (TF_CONFIG's worker ports, JAX_COORDINATOR_ADDRESS), whatever --contract sets.
  plan_.plan.master_port = m.port;
  for (auto& [k, v] : rank_environment(plan_.plan, me_, plan_.scheduler, plan_.job_id, visible_))
    env_[k] = v;
  tf_port_ = net::PortHold{};  // the rendezvous may move MASTER_PORT, and the worker port with it
  hold_tf_port();
  check_reachable_ = m.check != 0;
  if (m.preflight && me_.local_rank == 0 && !preflight_done_) run_preflight(m);
  check_reach();
}

void RankWrapper::on_message(const control::Go& m) {
  timers_.clear(Timer::reach);
  port_.probe.reset();  // the program takes the port over; the holder keeps it meanwhile
  bandwidth_.reset();   // every node's exchange is over (GO waits for them); no thread at fork
  start_program(m);
}

void RankWrapper::on_message(const control::Stop&) {
  stop_program();
}

void RankWrapper::on_message(const control::Signal& m) {
  on_signal(m.signal);
}

void RankWrapper::on_message(const control::DumpStacks&) {
  std::string text = child_.running() ? stacks::collect_stacks(env_, child_.pid(),
                                                               dir_->pystack_dir(), kStackTimeout)
                                      : "(the program is not running)\n";
  report(control::Stacks{control::Text{text}});
}

void RankWrapper::on_message(const control::Bye&) {
  bye_ = true;
}

// gpurun is gone: nobody supervises this rank any more.
void RankWrapper::on_control_closed() {
  control_.reset();
  stop_program();
}

// Rank 0: another rank checking that it reaches this host; the connection was the check.
void RankWrapper::on_probe() {
  int fd;
  while ((fd = accept4(port_.probe.get(), nullptr, nullptr, SOCK_CLOEXEC)) >= 0) close(fd);
}

void RankWrapper::on_output(int stream) {
  std::size_t i = static_cast<std::size_t>(stream - 1);
  auto bytes = proc::read_some(out_[i]);
  if (!bytes || bytes->empty()) return;
  output_since_beat_ = true;
  double now = proc::now_seconds();
  std::string lines = fwd_[i].take_lines(*bytes, now);
  if (!lines.empty()) forward(stream, Line::kWhole, lines);
  if (auto p = fwd_[i].take_partial(now - kPartialDelay)) forward(stream, Line::kPartial, *p);
  if (auto since = fwd_[i].partial_since(); since && !timers_.armed(Timer::flush))
    timers_.set(Timer::flush, *since + kPartialDelay);
}

void RankWrapper::on_timer(Timer t) {
  double now = proc::now_seconds();
  switch (t) {
    case Timer::kill:
      child_.signal_group(SIGKILL);
      return;
    case Timer::reach:
      check_reach();
      return;
    case Timer::heartbeat:
      beat();
      timers_.set(Timer::heartbeat, now + 1.0);
      return;
    case Timer::flush:
      for (std::size_t i = 0; i < 2; ++i) {
        if (auto p = fwd_[i].take_partial(now - kPartialDelay + 1e-3))
          forward(static_cast<int>(i) + 1, Line::kPartial, *p);
        if (auto since = fwd_[i].partial_since(); since && !timers_.armed(Timer::flush))
          timers_.set(Timer::flush, *since + kPartialDelay);
      }
      return;
  }
}

// With --contract tf, TF_CONFIG's worker port of this rank (MASTER_PORT + 1 + local rank): held
// from now until the wrapper ends; "" when held (or not needed), else why not.
std::string RankWrapper::hold_tf_port() {
  if (!plan_.plan.contracts.tf) return "";
  const int port = tf_worker_port(master_port_, me_.local_rank);
  if (!tf_port_.holder) {
    tf_port_ = net::hold_port(port, /*fixed=*/true);
    tf_port_.probe.reset();  // only the holder: nothing listens there before TensorFlow does
  }
  if (tf_port_.holder) return "";
  return fmt::format("TF_CONFIG's worker port {} (MASTER_PORT + 1 + local rank {}) is in use on "
                     "this node: free it, give --master-port another base, or leave tf out of "
                     "--contract",
                     port, me_.local_rank);
}

// Which interface routes to rank 0's host (NCCL and Gloo are told, unless the user chose), and
// whether this rank reaches it there; retried until gpurun says GO or gives up.
void RankWrapper::check_reach() {
  const std::string& master = plan_.plan.master_addr;
  std::string why;
  try {
    net::Route r = net::route_to(master);
    iface_ = r.iface;  // NCCL/GLOO_SOCKET_IFNAME at the start (start_environment)
    // Wrappers that share a relay share a network namespace (an abstract socket lives in one):
    // the one that forked it checks for them all, so rank 0's port sees one check a node.
    const bool checked_by_relay_owner = relayed_ && relay_ < 0;
    if (check_reachable_ && !checked_by_relay_owner)
      why = net::try_connect(master, master_port_, kReachAttempt);
    if (why.empty()) why = hold_tf_port();
  } catch (const Error& e) {
    why = e.what();
  }
  if (why.empty()) {
    report(control::Reach{1, iface_.empty() ? "?" : iface_, {}});
    return;
  }
  if (why != reach_error_)  // the first failure, or a new reason: gpurun names it if it lasts
    report(control::Reach{0, iface_.empty() ? "?" : iface_, control::Text{why}});
  reach_error_ = why;
  timers_.set(Timer::reach, proc::now_seconds() + kReachRetry);
}

void RankWrapper::stop_program() {
  if (!started_program_) {
    abort_signal_ = SIGTERM;
    return;
  }
  child_.signal_group(SIGTERM);
  child_.signal_group(SIGCONT);       // a stopped process takes its TERM now, not when continued
  if (!timers_.armed(Timer::kill)) {  // the stop's grace runs from now, whatever came before
    signalled_at_ = proc::now_seconds();
    timers_.set(Timer::kill, *signalled_at_ + plan_.wrapper.kill_grace);
  }
}

void RankWrapper::report(const control::ToSupervisor& m) {
  if (control_) common::write_all(control_.get(), control::encode(m));
}

void RankWrapper::forward(int stream, Line line, const std::string& text) {
  const bool partial = line == Line::kPartial;
  if (control_) {
    report(control::Output{stream, partial ? 1 : 0, control::Text{text}});
    return;
  }
  common::write_all(stream == 2 ? STDERR_FILENO : STDOUT_FILENO, partial ? text + "\n" : text);
}

}  // namespace gpurun::launcher

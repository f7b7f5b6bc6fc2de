// supervisor.cc: the Supervisor's event loop and its handlers (supervisor.h).
#include "supervisor.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cerrno>

namespace gpurun::launcher {

Supervisor::Supervisor(RunConfig& cfg)
    : cfg_(cfg),
      world_(cfg.plan.world_size),
      single_machine_(cfg.alloc.scheduler == Scheduler::local ||
                      cfg.alloc.scheduler == Scheduler::gpuq),
      ranks_(static_cast<std::size_t>(cfg.plan.world_size)) {}

int Supervisor::run() {
  choose_master_port();
  open_control();
  signals_.emplace(std::vector<int>{SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGCHLD});
  start_engine();
  arm_checkpoint_timer();
  while (!done()) wait_and_dispatch();
  hostfile_.reset();
  return result();
}

bool Supervisor::engine_done() const {
  for (const auto& c : children_)
    if (c.running()) return false;
  return true;
}

// Done once the engine has exited and every wrapper's connection closed (or 2 s after the
// engine, for a wrapper whose connection lingers).
bool Supervisor::done() {
  if (!engine_done()) return false;
  bool open = false;
  for (const auto& c : conns_) open = open || c.fd;
  if (!open) return true;
  if (!timers_.armed(Timer::drain)) timers_.set(Timer::drain, proc::now_seconds() + 2);
  return false;
}

void Supervisor::wait_and_dispatch() {
  std::vector<pollfd> fds{{signals_->fd(), POLLIN, 0}, {control_.fd.get(), POLLIN, 0}};
  for (const auto& c : conns_) fds.push_back({c.fd.get(), POLLIN, 0});
  poll(fds.data(), fds.size(), timers_.wait_ms(proc::now_seconds(), 1000));

  if (fds[0].revents & POLLIN)
    for (int s : signals_->drain()) on_signal(s);
  if (fds[1].revents & POLLIN) on_connect();
  // on_connect() may have added connections; they are polled next time.
  for (std::size_t i = 2; i < fds.size(); ++i)
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) on_readable(conns_[i - 2]);
  for (Timer t : timers_.take_due(proc::now_seconds())) on_timer(t);
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
  say(fmt::format("forwarding {} to {} rank{}", common::signal_name(sig), world_,
                  world_ == 1 ? "" : "s"));
  broadcast(control::Signal{sig});
  if (sig == SIGUSR1 || sig == SIGUSR2) checkpoint_signal_sent_ = sig;
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
    forwarded_stop_signal_ = sig;
    timers_.set(Timer::stop_after_signal, proc::now_seconds() + cfg_.stop_timeout);
  }
}

void Supervisor::on_child_exit(pid_t pid, int status) {
  for (auto& c : children_)
    if (c.reaped(pid, status)) return;
}

void Supervisor::on_connect() {
  int fd;
  while ((fd = accept4(control_.fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0)
    conns_.push_back(Conn{common::Fd(fd), proc::LineReader(), -1});
}

void Supervisor::on_readable(Conn& c) {
  if (!c.fd) return;
  std::vector<std::string> lines;
  auto state = c.in.read_from(c.fd.get(), lines);
  for (const auto& line : lines) {
    auto m = control::parse_to_supervisor(line);
    bool hello = m && std::holds_alternative<control::Hello>(*m);
    if (c.rank < 0 && !hello) {  // a first line that is not HELLO: not one of ours
      state = proc::LineReader::State::closed;
      break;
    }
    if (!m || (c.rank >= 0 && hello)) continue;  // unknown to this gpurun, or a repeat
    std::visit([&](const auto& msg) { on_message(c, msg); }, *m);
    if (!c.fd) return;
  }
  if (state != proc::LineReader::State::open) on_disconnect(c);
}

void Supervisor::on_message(Conn& c, const control::Hello& m) {
  if (m.token != token_ || m.rank < 0 || m.rank >= world_ ||
      ranks_[static_cast<std::size_t>(m.rank)].started) {
    c.fd.reset();  // not one of ours
    return;
  }
  c.rank = m.rank;
  RankState& r = ranks_[static_cast<std::size_t>(m.rank)];
  r.started = true;
  r.host = m.host;
  if (++started_ == world_) timers_.clear(Timer::start);
  if (stopping_) send(c, control::Stop{});
  if (forwarded_stop_signal_) send(c, control::Signal{forwarded_stop_signal_});
}

void Supervisor::on_message(Conn& c, const control::Exit& m) {
  RankState& r = ranks_[static_cast<std::size_t>(c.rank)];
  if (r.exited) return;
  r.exited = true;
  if (m.code != 0 || m.signal != 0) {
    std::string what = m.signal ? fmt::format("was killed by signal {} ({})", m.signal,
                                              common::signal_name(m.signal))
                                : fmt::format("exited with code {}", m.code);
    record_failure(c.rank, what, m.signal ? 128 + m.signal : m.code, m.seconds);
  }
}

void Supervisor::on_disconnect(Conn& c) {
  c.fd.reset();
  if (c.rank < 0) return;
  RankState& r = ranks_[static_cast<std::size_t>(c.rank)];
  if (r.exited) return;
  r.exited = true;
  record_failure(c.rank, "was lost (its wrapper ended without reporting: killed?)", 137,
                 proc::now_seconds() - t0_);
}

void Supervisor::on_timer(Timer t) {
  double now = proc::now_seconds();
  switch (t) {
    case Timer::start: {
      if (stopping_ || started_ == world_) return;
      std::string missing;
      int shown = 0;
      for (int r = 0; r < world_ && shown < 8; ++r)
        if (!ranks_[static_cast<std::size_t>(r)].started)
          missing += fmt::format("{}{}", shown++ ? ", " : "", r);
      say(fmt::format("ranks {}{} did not start within {:.0f} s (of {} ranks {} started); stopping",
                      missing, world_ - started_ > shown ? ", ..." : "", cfg_.start_timeout, world_,
                      started_));
      begin_stop("");
      failure_ = Failure{-1, "", "did not start", 1, now - t0_};
      return;
    }
    case Timer::checkpoint:
      say(fmt::format("job time nearly over: sending {} to all ranks to checkpoint",
                      common::signal_name(cfg_.checkpoint_signal)));
      broadcast(control::Signal{cfg_.checkpoint_signal});
      checkpoint_signal_sent_ = cfg_.checkpoint_signal;
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
      for (auto& c : conns_) c.fd.reset();  // the engine is gone: stop waiting for stragglers
      return;
  }
}

void Supervisor::send(Conn& c, const control::ToWrapper& m) {
  if (c.fd) common::write_all(c.fd.get(), control::encode(m));
}

void Supervisor::broadcast(const control::ToWrapper& m) {
  std::string line = control::encode(m);
  for (auto& c : conns_)
    if (c.fd && c.rank >= 0) common::write_all(c.fd.get(), line);
}

void Supervisor::begin_stop(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  for (int r = 0; r < world_; ++r) {
    const RankState& s = ranks_[static_cast<std::size_t>(r)];
    if (s.started && !s.exited && (!failure_ || failure_->rank != r)) ++stopped_others_;
  }
  broadcast(control::Stop{});
  // The wrappers end their programs; the engine then sees its tasks gone and reaps them.
  // Only an engine that lingers gets TERM (after 2 s) and KILL (after --kill-grace more).
  double now = proc::now_seconds();
  timers_.set(Timer::engine_term, now + 2);
  timers_.set(Timer::engine_kill, now + 2 + cfg_.kill_grace);
  if (!why.empty()) say(why);
}

void Supervisor::record_failure(int rank, const std::string& what, int status, double secs) {
  if (failure_) return;
  failure_ = Failure{rank, ranks_[static_cast<std::size_t>(rank)].host, what, status, secs};
  begin_stop("");
}

void Supervisor::say(const std::string& msg) const {
  if (!cfg_.quiet) fmt::print(stderr, "gpurun: {}\n", msg);
}

int run_supervisor(RunConfig& cfg) {
  return Supervisor(cfg).run();
}

}  // namespace gpurun::launcher

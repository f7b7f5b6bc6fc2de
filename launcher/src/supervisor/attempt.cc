// attempt.cc: one attempt's bookkeeping (attempt.h).
#include "supervisor/attempt.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>

#include "gpurun/common/posix.h"

namespace gpurun::launcher {

Attempt::Attempt(int world, double hang_timeout)
    : hang_timeout_(hang_timeout), ranks_(static_cast<std::size_t>(world)) {}

bool Attempt::on_hello(int r, std::string host) {
  if (r < 0 || r >= world() || rank(r).started) return false;
  Rank& s = at(r);
  s.started = true;
  s.host = std::move(host);
  ++started_;
  return true;
}

bool Attempt::on_reach(int r, std::string iface, std::optional<std::string> error) {
  Rank& s = at(r);
  s.iface = std::move(iface);
  s.reach_error = error.value_or("");
  if (error || s.reached) return false;
  s.reached = true;
  ++reached_;
  return go_due();
}

void Attempt::expect_preflight(const std::vector<int>& ranks, bool refuse) {
  refuse_ = refuse;
  for (int r : ranks)
    if (r >= 0 && r < world() && !rank(r).checks_node) {
      at(r).checks_node = true;
      ++preflight_expected_;
    }
}

bool Attempt::on_preflight(int r, PreflightReport report) {
  if (r < 0 || r >= world() || !rank(r).checks_node || rank(r).preflight) return false;
  if (!report.failures.empty()) ++preflight_failed_;
  at(r).preflight = std::move(report);
  ++preflight_in_;
  return go_due();
}

bool Attempt::go_due() {
  if (reached_ < world() || !preflight_done() || preflight_refused() || go_sent_ || stopping_)
    return false;
  go_sent_ = true;
  return true;
}

bool Attempt::on_running(int r, double now) {
  Rank& s = at(r);
  if (s.running) return false;
  s.running = true;
  s.last_progress = now;
  return ++running_ == world();
}

void Attempt::on_step(int r, std::int64_t step, double now) {
  Rank& s = at(r);
  s.last_progress = now;
  if (step != s.step) s.step_since = now;
  s.step = step;
}

void Attempt::on_stacks(int r, std::string text) {
  at(r).stacks = std::move(text);
}

bool Attempt::on_end(int r) {
  Rank& s = at(r);
  if (s.exited) return false;
  s.exited = true;
  return true;
}

bool Attempt::fail(int r, std::string what, int status, double seconds) {
  if (failure_) return false;
  failure_ = Failure{
      r, r >= 0 ? rank(r).host : "", std::move(what), status, seconds, all_running(), false};
  return true;
}

bool Attempt::fail_by_end(int r, const ProgramEnd& e) {
  const int status = e.signal ? 128 + e.signal : e.code;
  // The wrapper's own failure: the program's running time means nothing there.
  if (!e.what.empty()) return fail(r, e.what, status, -1);
  if (e.code == 0 && e.signal == 0) return false;
  std::string what = e.signal ? fmt::format("was killed by signal {} ({})", e.signal,
                                            common::signal_name(e.signal))
                              : fmt::format("exited with code {}", e.code);
  if (!fail(r, std::move(what), status, e.seconds)) return false;
  failure_->died = e.signal != 0;
  return true;
}

bool Attempt::on_lost(int r, double seconds, std::string what) {
  if (!on_end(r)) return false;
  if (!fail(r, std::move(what), 137, seconds)) return false;
  failure_->died = true;
  return true;
}

// A terminal sends SIGINT to a whole process group: a rank that dies of it was stopped by its
// user even when gpurun got no signal. After a failure, every end follows from that failure.
bool Attempt::ended_by_user_stop(const ProgramEnd& e, int stop_signal) const {
  return !failure_ && e.what.empty() && (e.signal == SIGINT || stop_signal != 0);
}

bool Attempt::begin_stop() {
  if (stopping_) return false;
  stopping_ = true;
  for (int r = 0; r < world(); ++r)
    if (rank(r).started && !rank(r).exited) stopped_.push_back(r);
  return true;
}

std::optional<Attempt::Hang> Attempt::find_hang(double now) {
  if (stopping_ || hung()) return std::nullopt;
  double latest = 0;
  std::int64_t top = -1;
  for (const auto& r : ranks_) {
    if (!r.running || r.exited) continue;
    latest = std::max(latest, r.last_progress);
    top = std::max(top, r.step);
  }
  if (latest == 0) return std::nullopt;  // every rank has ended
  if (now - latest >= hang_timeout_) return Hang{-1, -1, top};
  for (int i = 0; i < world(); ++i) {
    Rank& r = at(i);
    if (!behind(r, top))
      r.behind_since = 0;
    else if (r.behind_since == 0)
      r.behind_since = now;
    if (stuck_behind(r, top, now)) return Hang{i, r.step, top};
  }
  return std::nullopt;
}

// Running, and its step below the highest; a rank that never beat (it only prints) has no step.
bool Attempt::behind(const Rank& r, std::int64_t top) {
  return r.running && !r.exited && r.step >= 0 && r.step < top;
}

// Behind the highest step for --hang-timeout seconds, and not one step further meanwhile. A
// slower rank that still advances is not stuck, nor are ranks that all sat on one long step (an
// evaluation) until the first moves on.
bool Attempt::stuck_behind(const Rank& r, std::int64_t top, double now) const {
  return behind(r, top) && r.behind_since > 0 &&
         now - std::max(r.step_since, r.behind_since) >= hang_timeout_;
}

std::int64_t Attempt::top_step() const {
  std::int64_t top = -1;
  for (const auto& r : ranks_) top = std::max(top, r.step);
  return top;
}

// Once the job hangs, how long the rank has been behind does not matter (when no rank
// progressed, that can be a moment shorter than its step's age).
bool Attempt::unmoved(const Rank& r, std::int64_t top, double now) const {
  return behind(r, top) && now - r.step_since >= hang_timeout_;
}

bool Attempt::all_stacks_in() const {
  for (const auto& r : ranks_)
    if (r.running && !r.exited && !r.stacks) return false;
  return true;
}

Attempt::Restart Attempt::restart(int restarts_done, int max_restarts, int stop_signal) const {
  if (!failure_ || failure_->rank < 0 || hung() || stop_signal != 0) return Restart::no;
  if (restarts_done >= max_restarts) return Restart::no;
  if (!failure_->all_running) return Restart::no_failed_before_all_ran;
  return Restart::yes;
}

}  // namespace gpurun::launcher

// attempt.h: one attempt's bookkeeping (supervisor.h), apart from the sockets, processes and
// printing: which ranks said HELLO, reached rank 0's host, run their program, report steps and
// ended; the nodes' preflight reports; the attempt's first failure; when GO is due; which ranks the
// stop found running; the hang rules; whether to restart. No I/O and no clock: every time is a
// `now` the caller passes in (seconds, above 0), so each rule is unit-tested
// (tests/launcher/attempt_test.cc). Private to the gpurun binary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpurun::launcher {

class Attempt {
 public:
  // --preflight: what a node's local rank 0 found there (control::Preflight).
  struct PreflightReport {
    std::vector<std::string> failures, notes;
    double mb_per_s = -1;  // --preflight-bandwidth's figure; -1: none
  };
  struct Rank {
    bool started = false, reached = false, running = false, exited = false;
    std::string host, iface, reach_error;
    double last_progress = 0;
    double step_since = 0;    // when `step` took its value
    double behind_since = 0;  // since when its step is below the highest (0: it is not)
    std::int64_t step = -1;
    std::optional<std::string> stacks;
    bool checks_node = false;  // reports its node's preflight
    std::optional<PreflightReport> preflight;
  };
  struct Failure {
    int rank;  // -1: the job as a whole (ranks that never started, a hang, a stop before start)
    std::string host, what;
    int status;
    double seconds;    // -1: unknown
    bool all_running;  // every rank's program had started when it failed
    // Killed by a signal, or its wrapper vanished: how a rank ends when its node dies (an exit
    // code is the program's own verdict, the same on any node). node_loss.h reads it.
    bool died = false;
  };
  // How a rank's program ended, as its wrapper reported (EXIT).
  struct ProgramEnd {
    int code = 0;
    int signal = 0;
    double seconds = 0;
    std::string what;  // the wrapper's own failure (the program did not start), else empty
  };
  // Why the job hangs: rank -1 when no rank made progress; else that rank's step stayed
  // below the highest (`top`) without moving.
  struct Hang {
    int rank;
    std::int64_t step, top;
  };
  enum class Restart {
    no,                        // no rank failed, it was a hang or a stop, or no restarts are left
    no_failed_before_all_ran,  // a rank failed before every rank's program had started
    yes
  };

  Attempt(int world, double hang_timeout);

  // A wrapper's HELLO; false for a rank outside the job or one that said it already.
  bool on_hello(int rank, std::string host);
  // REACH: `error` is why the rank cannot reach rank 0's host (nullopt: it can). True once, when
  // the last rank reached it and the attempt is not stopping: GO is due.
  bool on_reach(int rank, std::string iface, std::optional<std::string> error);
  // --preflight: `ranks` (each node's local rank 0) report their node's checks, and GO waits for
  // every one; with `refuse` (--preflight fail), a failure on any node refuses GO.
  void expect_preflight(const std::vector<int>& ranks, bool refuse);
  // PREFLIGHT from `rank` (ignored from a rank not expected to send one, or a repeat). True once,
  // when it was the last report, every rank reached rank 0, and GO is not refused: GO is due.
  bool on_preflight(int rank, PreflightReport report);
  // Every expected report came (also when none was expected).
  bool preflight_done() const { return preflight_in_ == preflight_expected_; }
  // Done, and with `refuse` some node failed: GO never comes.
  bool preflight_refused() const { return preflight_done() && refuse_ && preflight_failed_ > 0; }
  // RUNNING: the rank's program started. True when it was the last rank's.
  bool on_running(int rank, double now);
  // A step report (PROGRESS): progress now, and the step's start when it changed.
  void on_step(int rank, std::int64_t step, double now);
  void on_stacks(int rank, std::string text);
  // The rank's program ended (EXIT, or its wrapper vanished). False when its end was known.
  bool on_end(int rank);

  // Records the attempt's first failure; later ones are not (they follow from the first, or
  // from the stop it began). True when `rank`'s was the first: the others must be stopped.
  bool fail(int rank, std::string what, int status, double seconds);
  // A program's end as a failure (exit code or signal other than 0, or the wrapper's own failure);
  // true when it was the attempt's first failure.
  bool fail_by_end(int rank, const ProgramEnd& end);
  // The rank's wrapper ended without reporting (its connection closed). True when that was the
  // attempt's first failure.
  // `what`: how it was lost (default: its wrapper's connection closed without an EXIT).
  bool on_lost(int rank, double seconds, std::string what = kLostWrapper);
  static constexpr const char* kLostWrapper =
      "was lost (its wrapper ended without reporting: killed?)";
  // Whether an end after the user asked to stop (`stop_signal`: the INT/TERM/HUP forwarded, 0
  // none), or of a SIGINT (Ctrl-C), is part of that stop rather than a failure.
  bool ended_by_user_stop(const ProgramEnd& end, int stop_signal) const;

  // Begins the stop: records which ranks were running. False when it had begun already.
  bool begin_stop();
  void mark_hung(std::string why) { hang_ = std::move(why); }

  // The hang rules at `now` (--hang-timeout): no running rank progressed for the timeout, or one
  // stayed behind the highest step without advancing for it. Nothing while stopping or already
  // hung. Each call notes since when each rank is behind, so it is called every check.
  std::optional<Hang> find_hang(double now);
  // The highest step any rank of the attempt reported.
  std::int64_t top_step() const;
  // Behind `top` and on the same step for the timeout (where a hung rank is).
  bool unmoved(const Rank& r, std::int64_t top, double now) const;
  // Every rank still running sent its stacks.
  bool all_stacks_in() const;

  // After the attempt: restart when a rank failed after every rank had started, the user did not
  // ask to stop (`stop_signal` 0), it was not a hang, and restarts are left.
  Restart restart(int restarts_done, int max_restarts, int stop_signal) const;

  const Rank& rank(int r) const { return ranks_[static_cast<std::size_t>(r)]; }
  const std::vector<Rank>& ranks() const { return ranks_; }
  int world() const { return static_cast<int>(ranks_.size()); }
  int started_count() const { return started_; }
  int reached_count() const { return reached_; }
  int running_count() const { return running_; }
  bool all_running() const { return running_ == world(); }
  bool go_sent() const { return go_sent_; }
  bool stopping() const { return stopping_; }
  bool hung() const { return hang_.has_value(); }
  const std::optional<Failure>& failure() const { return failure_; }
  // The ranks that had started and not ended when the stop began.
  const std::vector<int>& stopped() const { return stopped_; }

 private:
  Rank& at(int r) { return ranks_[static_cast<std::size_t>(r)]; }
  static bool behind(const Rank& r, std::int64_t top);
  bool stuck_behind(const Rank& r, std::int64_t top, double now) const;
  bool go_due();  // every rank reached, every preflight in and not refused: marks GO sent

  double hang_timeout_;
  std::vector<Rank> ranks_;
  int started_ = 0, reached_ = 0, running_ = 0;
  std::optional<Failure> failure_;
  std::vector<int> stopped_;
  bool stopping_ = false, go_sent_ = false;
  int preflight_expected_ = 0, preflight_in_ = 0, preflight_failed_ = 0;
  bool refuse_ = false;
  std::optional<std::string> hang_;  // why the job is called hung
};

}  // namespace gpurun::launcher

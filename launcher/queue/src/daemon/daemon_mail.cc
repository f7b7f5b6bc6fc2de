// gpuq daemon: the mails of a job's events (--mail-type, --mail-user; daemon.h, mailer.h), with
// Slurm's subjects ("Slurm Job_id=12 Name=train Ended, Run time 00:01:05, COMPLETED, ExitCode 0")
// under gpuq's name. The end's mail carries the job's `gpuq stats` summary. An array mails once,
// when its last task has ended, with each state's count, not once per task (and no BEGIN or
// TIME_LIMIT mails). A TIME_LIMIT[_NN] mail is sent once per run, recorded in the job's store
// document, so a restarted daemon does not send it again.
#include <fmt/format.h>

#include <iterator>
#include <map>

#include "daemon/daemon.h"
#include "daemon/store.h"
#include "gpurun/queue/format.h"
#include "gpurun/queue/usage_format.h"

namespace gpurun::queue {
namespace {

bool failed(JobState s) { return s != JobState::kCompleted && s != JobState::kCancelled; }

std::string recipient(const Job& j) { return j.mail.user.empty() ? j.user : j.mail.user; }

std::string head(const Job& j, const std::string& id) {
  return fmt::format("gpuq Job_id={} Name={}", id, j.name);
}

}  // namespace

void Daemon::mail_begin(const Job& j) {
  if (!(j.mail.events & kMailBegin) || j.array_job_id) return;
  const int64_t queued = std::max<int64_t>(0, j.start_ms - j.submit_ms) / 1000;
  mailer_.send({recipient(j),
                fmt::format("{} Began, Queued time {}", head(j, display_id(j)),
                            sacct_elapsed(queued)),
                fmt::format("Job {} started on {} with GPU(s) [{}].\n", display_id(j), host_,
                            join_ids(j.gpus))},
               j.id);
}

void Daemon::mail_requeue(const Job& j, const std::string& why) {
  if (!(j.mail.events & kMailRequeue)) return;
  mailer_.send({recipient(j), fmt::format("{} Requeued", head(j, display_id(j))),
                fmt::format("Job {} was requeued: {}\n", display_id(j), why)},
               j.id);
}

void Daemon::mail_time_limits(int64_t now) {
  if (now - time_limits_checked_ms_ < 1000) return;
  time_limits_checked_ms_ = now;
  for (auto& [id, j] : jobs_->active()) {
    const unsigned due = j.mail.events & kMailTimeLimits & ~j.mail_sent;
    if (!due || j.state != JobState::kRunning || !j.time_limit_s || j.array_job_id) continue;
    const int64_t run_ms = now - j.start_ms;
    for (auto it = std::rbegin(kMailEventNames); it != std::rend(kMailEventNames); ++it) {
      const MailEventName& e = *it;  // 50% first, when several are due at once
      if (!(due & e.event) || run_ms * 100 < j.time_limit_s * 1000 * e.percent) continue;
      j.mail_sent |= e.event;  // once, whether or not sendmail starts
      mailer_.send({recipient(j),
                    fmt::format("{} Reached {}time limit, Run time {}", head(j, display_id(j)),
                                e.percent < 100 ? fmt::format("{}% of ", e.percent) : "",
                                sacct_elapsed(run_ms / 1000)),
                    fmt::format("Job {} has run {} of its {} time limit.\n", display_id(j),
                                sacct_elapsed(run_ms / 1000), sacct_elapsed(j.time_limit_s))},
                   j.id);
    }
    if ((j.mail.events & kMailTimeLimits & ~j.mail_sent) != due) store_->update_job(j);
  }
}

// After finish() recorded `j`'s end (still in the job table).
void Daemon::mail_end(const Job& j) {
  if (!(j.mail.events & (kMailEnd | kMailFail))) return;
  if (j.array_job_id) return mail_array_end(j);
  const bool fail = failed(j.state);
  if (!(j.mail.events & kMailEnd) && !fail) return;
  const int64_t run_s = j.start_ms ? std::max<int64_t>(0, j.end_ms - j.start_ms) / 1000 : 0;
  mailer_.send({recipient(j),
                fmt::format("{} {}, Run time {}, {}, ExitCode {}", head(j, display_id(j)),
                            fail && (j.mail.events & kMailFail) ? "Failed" : "Ended",
                            sacct_elapsed(run_s), state_name(j.state),
                            j.exit_signal ? 128 + j.exit_signal : j.exit_code),
                format_stats(stats_reply(j, 0))},
               j.id);
}

// The last task of `last`'s array has ended (`last` itself is still counted active).
void Daemon::mail_array_end(const Job& last) {
  if (jobs_->active_in_array(last.array_job_id) > 1) return;
  std::map<JobState, int> counts;
  bool any_failed = false;
  if (const auto* members = jobs_->array_members(last.array_job_id))
    for (int64_t id : *members) {
      const JobState s = id == last.id ? last.state : jobs_->states().at(id);
      counts[s] += 1;
      any_failed = any_failed || failed(s);
    }
  if (!(last.mail.events & kMailEnd) && !any_failed) return;
  std::string tally;
  for (const auto& [state, n] : counts)
    tally += fmt::format("{}{} {}", tally.empty() ? "" : ", ", n, state_name(state));
  const std::string id = fmt::format("{}_*", last.array_job_id);
  mailer_.send({recipient(last),
                fmt::format("{} {}, {}", head(last, id),
                            any_failed && (last.mail.events & kMailFail) ? "Failed" : "Ended",
                            tally),
                fmt::format("Array job {}: every task has ended: {}.\nEach task: gpuq stats "
                            "{}_TASK\n",
                            last.array_job_id, tally, last.array_job_id)},
               last.id);
}

}  // namespace gpurun::queue

// gpuq daemon: `gpuq requeue ID...`, as Slurm's scontrol requeue. A running batch job is stopped
// the way a cancel stops it (SIGTERM to its process group, SIGKILL after KillWait) and, once its
// run has ended, goes back to the queue under the same id with restart_count + 1
// (SLURM_RESTART_COUNT), by Daemon::requeue, the path a --requeue job takes after NODE_FAIL.
//
// Crash safety: the request is a flag in the job's stored document (requeue_requested),
// committed with the turn's batch before the supervisor is signalled and before the client hears
// back. A daemon killed in between finds the flag: it signals an adopted supervisor again, and a
// run that ended meanwhile (or whose supervisor died, or whose machine rebooted) is requeued, not
// recorded as finished. Signalling first would let a crash before the commit end the job
// CANCELLED, its requeue lost.
#include <fmt/format.h>
#include <signal.h>

#include <set>

#include "daemon/daemon.h"
#include "daemon/store.h"
#include "gpurun/queue/format.h"
#include "supervise/job_supervisor.h"

namespace gpurun::queue {

std::string Daemon::requeue_refusal(int64_t job_id, const Job* j, const Peer& peer) const {
  const std::string id = shown_id(job_id);  // as the user names it (12_3 for a task)
  // Slurm also requeues finished batch jobs; gpuq keeps a finished run as its history's record
  // (its exit code, usage, GPU-hours), so a finished job is submitted again instead.
  if (!j) return fmt::format("job {} has already finished: submit it again (gpuq submit)", id);
  if (!may_control(peer, *j))
    return fmt::format("permission denied: job {} belongs to {}", id, j->user);
  if (j->state == JobState::kPending)  // scontrol: "Job is pending execution"
    return fmt::format("job {} is pending: only a running job can be requeued", id);
  if (!j->attach.socket.empty())
    return fmt::format("job {} is interactive (gpuq run or alloc): only batch jobs can be requeued",
                       id);
  if (j->no_requeue)  // scontrol refuses it too ("Requested operation is presently disabled")
    return fmt::format("job {} was submitted with --no-requeue", id);
  if (j->cancel_requested) return fmt::format("job {} is being cancelled", id);
  return "";
}

nlohmann::json Daemon::op_requeue(const Request& req, const Peer& peer) {
  nlohmann::json results = nlohmann::json::array();
  std::set<int64_t> via_array;
  std::vector<JobRef> unknown;
  for (int64_t id : resolve_ids(req.ids, &via_array, &unknown)) {
    Job* j = jobs_->find(id);
    // A whole array's tasks that are not running (pending, or ended) have nothing to requeue.
    if ((!j || j->state != JobState::kRunning) && via_array.count(id)) continue;
    std::string err = requeue_refusal(id, j, peer);
    if (err.empty() && !j->requeue_requested) {  // asked twice: once is enough
      log_event(*j, fmt::format("requeue requested by uid {}", peer.uid));
      j->requeue_requested = true;
      j->reason = fmt::format("Requeued by {}", peer.uid);  // why, once it is pending again
      store_->update_job(*j);                               // durable before the stop goes out
      requeue_stops_.push_back(id);
    }
    add_result(results, id, shown_id(id), err);
  }
  add_unknown_results(results, unknown);
  return results_reply(req.ids, results, "no task of the array is running");
}

void Daemon::send_requeue_stops() {
  std::vector<int64_t> ids;
  ids.swap(requeue_stops_);
  for (int64_t id : ids) {
    const Job* j = jobs_->find(id);
    auto r = runners_.find(id);
    // Ended meanwhile, or cancelled since (the cancel's SIGTERM went out): nothing to stop.
    if (!j || j->state != JobState::kRunning || !j->requeue_requested || j->cancel_requested ||
        r == runners_.end())
      continue;
    sigval v{};
    v.sival_int = kStopForRequeue;
    sigqueue(r->second.pid, SIGTERM, v);
  }
}

}  // namespace gpurun::queue

// The per-job supervisor: `gpuq __supervise RUN_DIR JOB_ID LOCK_FD`, started by the daemon in its
// own session. It runs the job in a new process group as the submitting user, enforces the time
// limit (--signal lead, SIGTERM, SIGKILL after KillWait), forwards signals the daemon asks for, and
// records how the job ended in RUN_DIR/N.status. It does not need the daemon: if the daemon is
// killed, the job keeps running and its end is still recorded for the restarted daemon.
#pragma once

#include <cstdint>
#include <string>

namespace gpurun::queue {

// Returns the supervisor's exit code (0 once a final status is written).
int run_supervisor(const std::string& run_dir, int64_t job_id, int lock_fd);

// The daemon asks a supervisor to forward signal `sig` to the job by sigqueue(SIGUSR1, sig);
// SIGTERM to the supervisor means "cancel the job".
constexpr int kForwardSignal = 10;  // SIGUSR1 on Linux; static_assert in supervisor.cc
// SIGTERM sent by sigqueue with this value stops the job the same way for `gpuq requeue`; only
// the line in its output differs (Slurm's "... DUE TO JOB REQUEUE ***"). The daemon, not the
// supervisor, decides from its store that the job goes back to the queue.
constexpr int kStopForRequeue = 1;

}  // namespace gpurun::queue

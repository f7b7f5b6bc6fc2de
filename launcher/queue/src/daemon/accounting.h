// What the daemon counts of the GPU time jobs used: each user's fair-share usage (GPU-seconds,
// decayed with a half-life, kept in the store's usage table) and the GPU-seconds of finished jobs
// by user (/metrics' counter, without a scan of the store per request). Running jobs count while
// they run: decayed() and gpu_seconds_by_user() add them from the job table.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/job_table.h"

namespace gpurun::queue {

class Store;

class Accounting {
 public:
  Accounting(Store& store, int64_t half_life_s);  // reads the usage table and the counter

  // A run of `j` that ended at `end_ms` held its GPUs: its GPU-seconds go to the user's
  // fair-share usage (into the store, with the caller's transaction) and to the counter, also
  // when the job is requeued and runs again.
  void charge(const Job& j, int64_t end_ms, int64_t now);
  // Each user's decayed usage at `now`, running jobs included: the scheduler's fair share.
  std::map<uint32_t, double> decayed(const JobTable& jobs, int64_t now) const;
  // GPU-seconds by user name, finished and running jobs; never less for a user than the last
  // answer said (/metrics' counter): a running job counts up to now, and its charge at the end
  // up to when it ended, which can be earlier than a look that came between.
  std::map<std::string, double> gpu_seconds_by_user(const JobTable& jobs, int64_t now);

  // Where the fair-share usage differs from the store's (invariant 8, daemon_invariants.cc).
  std::vector<std::string> violations() const;

 private:
  struct Usage {
    double gpu_seconds = 0;
    int64_t updated_ms = 0;
  };
  Store& store_;
  const int64_t half_life_ms_;
  std::map<uint32_t, Usage> usage_;
  std::map<std::string, double> finished_gpu_seconds_;
  std::map<std::string, double> said_gpu_seconds_;  // gpu_seconds_by_user's last answer
};

}  // namespace gpurun::queue

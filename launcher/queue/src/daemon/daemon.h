// The gpuq daemon: one per machine (as root) or per user. Single-threaded: a poll loop over the
// listening socket, client connections, a signalfd, and one pidfd per running job's supervisor.
// All state lives in the SQLite store. The daemon is its parts, each with its own state:
//   Connections (connections.h)  the socket and the clients: bytes in and out, per-user bounds
//   JobTable (job_table.h)       the in-memory mirror of the store's jobs: who is active, states
//   Accounting (accounting.h)    fair-share usage and GPU-seconds
//   Daemon, below                what requests mean (daemon_ops.cc, daemon_usage.cc) and the
//                                jobs' lifecycle: schedule, start, watch, finish, recover
//                                (daemon_jobs.cc), mails (daemon_mail.cc); the invariants between the parts and the store
//                                (daemon_invariants.cc)
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/accounting.h"
#include "daemon/connections.h"
#include "daemon/gpu_watch.h"
#include "daemon/job_table.h"
#include "daemon/mailer.h"
#include "daemon/mps.h"
#include "daemon/store.h"
#include "daemon/usage_sampler.h"
#include "gpurun/gpuinfo/gpu_sampler.h"
#include "gpurun/queue/job.h"
#include "gpurun/queue/protocol.h"
#include "job/request.h"

namespace gpurun::queue {

class Store;

// The start (ms, UTC) of the budget period ("week", "month", "total") that holds now_ms.
int64_t budget_period_start(const std::string& period, int64_t now_ms);

// A MIG device's gpuq id: 1000 + 10 x its GPU's index + its number under it (at most 7 per GPU),
// so it is the same after a restart and never a whole GPU's id.
constexpr int kMigIdBase = 1000;
inline int mig_id(int gpu, int mig) { return kMigIdBase + 10 * gpu + mig; }
// The GPU pool with each GPU in MIG mode replaced by its MIG devices (as a snapshot lists them).
std::vector<int> with_mig_devices(const std::vector<int>& gpus, const gpuinfo::GpuSnapshot& s,
                                  std::map<int, gpuinfo::GpuSample>* mig);

// What one user may make the daemon hold (README "Security"), besides one request at a time
// (kMaxRequestBytes in, kMaxReplyBytes out, kMaxIdsPerRequest jobs): pending and running jobs,
// and their scripts, arguments and environments (spec_bytes, job_table.h); bytes of unfinished
// requests, at most 64 connections and 64 MiB of unread replies (connections.h).
constexpr size_t kMaxActiveJobsPerUser = 10000;
constexpr size_t kMaxActiveBytesPerUser = size_t(64) << 20;

// A job as the status page, /api/status and `gpuq stats` show it: no environment, script or
// paths; with elapsed_s, gpu_hours, util_mean and its usage (daemon_usage.cc).
nlohmann::json job_brief(const Job& j, int64_t now_ms);

struct DaemonConfig {
  std::vector<int> gpus;
  std::string state_dir;
  std::string socket_path;
  int kill_wait_s = 30;       // Slurm's KillWait
  int max_gpus_per_user = 0;  // 0 = no limit
  int64_t fairshare_half_life_s = 7 * 24 * 3600;
  std::string self_exe;  // this binary, re-executed as the per-job supervisor
  // Where the boot id is read; tests point it at a file to simulate a reboot.
  std::string boot_id_file = "/proc/sys/kernel/random/boot_id";
  // Usage sampling (issue 12): every sample_interval_s seconds (0 = off) the GPUs and running
  // jobs are sampled; raw samples are kept sample_retention_s, per-job figures for good.
  int sample_interval_s = 10;
  int64_t sample_retention_s = 7 * 24 * 3600;
  gpuinfo::SamplerConfig sampler;  // nvidia_smi from GPURUN_NVIDIA_SMI (daemon_main.cc)
  std::string sendmail = "/usr/sbin/sendmail";  // --mail-type's mails go through it
  GpuWatchConfig watch;  // use outside the queue, idle and busy flags (gpu_watch.h)
  // --shards-per-gpu: GPU id -> the shards it offers to --gres=shard:K jobs (absent: none).
  std::map<int, int> shards_per_gpu;
  std::string mps_control;  // --mps: the nvidia-cuda-mps-control to run ("" = no MPS)
  // MIG devices scheduled as GPUs: their gpuq id (mig_id()) -> the device (its GPU's index, its
  // number under it, its MIG- UUID, its profile as name). Their ids are in `gpus`, their GPU's not.
  std::map<int, gpuinfo::GpuSample> mig;
  bool enforce_budgets = false;  // --enforce-budgets: cancel running jobs past their budget
  // Tests: check the maps against the store after recovery and every turn, and stop with an
  // error naming what is broken (daemon_invariants.cc).
  bool check_invariants = false;
};

struct SupervisorStatus;

class Daemon {
 public:
  explicit Daemon(DaemonConfig cfg);
  ~Daemon();
  int run();  // returns when SIGTERM/SIGINT arrives; running jobs keep running and are adopted
              // later

 private:
  struct Runner {
    pid_t pid = 0;
    Fd pidfd;
  };

  // daemon.cc: start-up and the loop
  void lock_state_dir();
  void link_srun();
  void turn(const std::vector<pollfd>& fds, size_t runner_base,
            const std::vector<int64_t>& runner_ids, bool polling);
  void end_turn();        // commit the batch, start supervisors
  bool stop_requested();  // reads the signalfd

  // daemon_ops.cc: requests
  nlohmann::json handle(const Request& req, const Peer& peer);
  nlohmann::json op_submit(const SubmitRequest& req, const Peer& peer);
  void check_path_lengths(const Job& base) const;
  Job job_from_request(const SubmitRequest& req, const Peer& peer) const;
  std::vector<Job> insert_jobs(const Job& base, const JobRequest& r, const std::string& key,
                               const std::vector<int>& indices);  // one transaction
  nlohmann::json op_queue(const Request& req, const Peer& peer);
  nlohmann::json op_show(const Request& req, const Peer& peer);
  nlohmann::json op_cancel(const Request& req, const Peer& peer);
  nlohmann::json op_hold(const Request& req, const Peer& peer, bool hold);
  // daemon_requeue.cc: `gpuq requeue`, as scontrol requeue
  nlohmann::json op_requeue(const Request& req, const Peer& peer);
  // The refusal for requeueing job `j` (active, or nullptr when it has finished); "" when it may.
  std::string requeue_refusal(int64_t id, const Job* j, const Peer& peer) const;
  void send_requeue_stops();  // after the batch commit: SIGTERM for the jobs requeued in it
  nlohmann::json op_history(const Request& req, const Peer& peer);
  // A job's id as its user names it (display_id: 12_3 for an array's task), for messages.
  std::string shown_id(int64_t id) const;
  // One job's answer to cancel, hold, release or requeue (err empty: done), `shown` its id.
  void add_result(nlohmann::json& results, int64_t id, const std::string& shown,
                  const std::string& err) const;
  // Their reply: the answers, and for each whole array named whose tasks got none, the error
  // `untouched` (all of them finished, say: the request did nothing).
  nlohmann::json results_reply(const std::vector<JobRef>& refs, nlohmann::json& results,
                               const char* untouched) const;
  nlohmann::json history_of(const Request& req, const Peer& peer, const std::set<uint32_t>& uids,
                            size_t limit);  // history -j
  nlohmann::json op_drain(const Peer& peer, bool drain);
  // daemon_usage.cc: sampling and the usage requests (status, stats, report)
  nlohmann::json op_status(const Request& req);
  // A shared GPU's shards: total, held, the shard jobs' briefs (null for a GPU without shards).
  nlohmann::json shards_json(int gpu, const std::vector<const Job*>* jobs, int64_t now);
  // holder: each GPU a whole-GPU job holds; sharers: the shard jobs on each shared GPU.
  nlohmann::json status_gpus(const std::map<int, const Job*>& holder,
                             const std::map<int, std::vector<const Job*>>& sharers,
                             int spark_points, int64_t now);
  nlohmann::json op_stats(const Request& req);
  nlohmann::json op_report(const Request& req);
  // What `gpuq stats` shows of `j`: its brief and samples (at most max_points per GPU; 0 = all,
  // up to kMaxSamplesPerReply).
  nlohmann::json stats_reply(const Job& j, size_t max_points);
  // What `gpuq stats` and the page show of an array's id: each task's brief (the first
  // kMaxTasksListed; tasks_total says how many there are).
  nlohmann::json array_stats_reply(const std::string& array, const std::vector<int64_t>& tasks);
  void start_sampling();   // in run(), once signals are blocked (the thread must not take them)
  void publish_targets();  // running jobs' sessions, to the sampling thread
  void on_usage_ticks();   // inside the batch
  void apply_tick(const UsageSampler::Tick& t);
  GpuWatch::Holders gpu_holders() const;  // each held GPU -> the running jobs holding it
  void watch_gpus(const UsageSampler::Tick& t);
  // Before GPUs are given out: true when the newest list of GPU processes is recent enough (or
  // cannot be had); otherwise asks the sampler for a fresh one and returns false.
  bool outside_use_checked(int64_t now);
  void restore_idle_runs();  // recovery: each running job's idle run, from its stored samples
  nlohmann::json outside_json(int gpu) const;
  // "12", "12_3" -> job ids; ids reached through a whole-array id also go into *via_array. At
  // most kMaxIdsPerRequest, an array counting as its tasks. A ref naming no job is an error,
  // or, with `unknown`, goes there (unless every ref is unknown: then the error).
  std::vector<int64_t> resolve_ids(const std::vector<JobRef>& refs,
                                   std::set<int64_t>* via_array = nullptr,
                                   std::vector<JobRef>* unknown = nullptr);
  // cancel, hold, release and requeue: each unknown id of `unknown` as a failed result, as
  // scancel and scontrol go on past one and say so.
  void add_unknown_results(nlohmann::json& results, const std::vector<JobRef>& unknown) const;
  // The same for a list of several that may name jobs that do not exist (queue -j, history -j,
  // show): those are skipped, as squeue and sacct skip them; one unknown id alone is an error.
  // Each job once.
  std::set<int64_t> resolve_listed(const std::vector<JobRef>& refs);
  std::string pending_reason(const Job& j) const;  // squeue's (Reason)
  int shards_of(int gpu) const;                    // its --shards-per-gpu, 0 when none
  // A schedulable id's figures in a snapshot: a whole GPU's, or a MIG device's.
  const gpuinfo::GpuSample* sample_of(const gpuinfo::GpuSnapshot& s, int id) const;
  std::string visible_devices(const std::vector<int>& ids) const;  // MIG devices by UUID
  nlohmann::json mig_json(int id) const;  // a MIG device's GPU, number, profile, UUID; else null
  int mig_devices_of(const std::string& profile) const;  // how many the pool has
  // --mps: an MPS daemon for the GPU of shard job `j` (started when it is the first there), and
  // its variables in the job's environment; mps_release() stops those of GPUs no shard job holds.
  void mps_for(const Job& j, std::map<std::string, std::string>& env);
  void mps_release();
  int most_shards() const;                         // the most any GPU offers
  bool may_control(const Peer& peer, const Job& j) const;
  enum class JobStream { kOutput, kError };
  std::string output_path(const Job& j, JobStream which) const;

  // daemon_jobs.cc: running jobs
  void recover();
  void schedule_pass();
  void mark_running(Job& j, const std::vector<int>& gpus);  // durable with the batch commit
  void spawn_supervisor(Job& j);                            // only after that commit
  ArrayShape shape_of(const Job& j);                        // its array's task ids
  void watch(int64_t job_id, pid_t pid);  // a supervisor, started now or adopted at recovery
  void on_supervisor_exit(int64_t job_id);
  void finish(Job& j, JobState state, int exit_code, int exit_signal, int64_t end_ms,
              const std::string& reason);
  void reap_orphans(const SupervisorStatus& st);
  void remove_cleanup_files();
  // A run that ended without a verdict (dead supervisor, reboot): back to the queue when the job
  // has --requeue or `gpuq requeue` asked for it, else NODE_FAIL.
  void requeue_or_fail(Job& j, const std::string& why);
  // Its run ended at end_ms: charged and kept, then PENDING, restart_count + 1.
  void requeue(Job& j, int64_t end_ms, const std::string& why);
  const char* dependency_reason(const Job& j) const;  // nullptr when satisfied
  // One line of the audit trail in the daemon's log: "job 12 (train, alice): started on GPUs 0,1".
  void log_event(const Job& j, const std::string& what) const;

  // daemon_mail.cc: --mail-type's mails
  void mail_begin(const Job& j);
  void mail_requeue(const Job& j, const std::string& why);
  void mail_end(const Job& j);
  void mail_array_end(const Job& last);
  void mail_time_limits(int64_t now);  // the TIME_LIMIT[_NN] mails now due, once a second
  int64_t time_limits_checked_ms_ = 0;

  // daemon_budgets.cc: GPU-hour budgets
  struct BudgetUse {
    Store::Budget budget;
    double spent_hours = 0;
    // Not spent yet but promised: the running jobs' GPUs times what is left of their time limits,
    // and the jobs this scheduling pass starts (reserve_budget).
    double committed_hours = 0;
    int64_t period_start_ms = 0;
  };
  std::vector<BudgetUse> budget_uses(int64_t now);
  double budget_need_hours(const Job& j) const;
  const char* budget_reason(const Job& j, const std::vector<BudgetUse>& uses) const;
  void reserve_budget(const Job& j, std::vector<BudgetUse>& uses) const;
  nlohmann::json budgets_json(int64_t now);
  nlohmann::json op_budget(const Request& req);
  nlohmann::json op_budget_set(const Request& req, const Peer& peer);
  void enforce_budgets(int64_t now);  // with --enforce-budgets, once a second
  int64_t budgets_checked_ms_ = 0;

  // daemon_jobs.cc: a pending gpuq run job whose client is gone leaves the queue (every 2 s)
  void cancel_abandoned_runs(int64_t now);
  int64_t runs_checked_ms_ = 0;

  // daemon_invariants.cc: what the parts owe the store (written down there)
  std::vector<std::string> invariant_violations();
  void check_invariants(const char* when);  // throws std::logic_error when one is broken

  DaemonConfig cfg_;
  std::string run_dir_, spool_dir_, bin_dir_, host_, boot_id_;
  std::vector<int64_t> to_spawn_;  // marked RUNNING in the current batch
  std::vector<int64_t> cleanup_;   // run files to remove once the batch is committed
  std::vector<int64_t> requeue_stops_;  // requeued in the current batch: stopped once committed
  Fd lock_fd_, signal_fd_;
  std::unique_ptr<Store> store_;
  Connections clients_;
  Mailer mailer_;
  Mps mps_;
  std::set<int> mps_gpus_;  // GPUs whose MPS daemon gpuq started (or, after a restart, assumes)
  // From here on the parts mirror the store; daemon_invariants.cc says exactly how.
  std::unique_ptr<JobTable> jobs_;
  std::unique_ptr<Accounting> accounting_;
  std::map<int64_t, Runner> runners_;  // running job id -> its supervisor
  bool as_root_ = false;
  bool draining_ = false;
  bool dirty_ = true;        // something changed: run the scheduler
  bool recovering_ = false;  // in recover(): what ended did so while no daemon watched
  std::unique_ptr<UsageSampler> sampler_;
  std::vector<UsageSampler::Target> published_targets_;
  std::optional<gpuinfo::GpuSnapshot> last_gpus_;  // the newest GPU sample, every GPU
  std::string sample_error_;                       // why the newest sample failed, if it did
  GpuWatch watch_;
  int64_t look_requested_ms_ = 0;  // when outside_use_checked() asked for a fresh sample
};

}  // namespace gpurun::queue

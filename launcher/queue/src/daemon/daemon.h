// The gpuq daemon: one per machine (as root) or per user. Single-threaded: a poll loop over the
// listening socket, client connections, a signalfd, and one pidfd per running job's supervisor.
// All state lives in the SQLite store; the in-memory maps mirror the active (pending and running)
// jobs so that scheduling and `gpuq queue` never scan the database.
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

#include "daemon/usage_sampler.h"
#include "gpurun/gpuinfo/gpu_sampler.h"
#include "gpurun/queue/job.h"
#include "gpurun/queue/protocol.h"
#include "job/request.h"

namespace gpurun::queue {

class Store;

// What one user may make the daemon hold (README "Security"), besides one request at a time
// (kMaxRequestBytes in, kMaxReplyBytes out, kMaxIdsPerRequest jobs): pending and running jobs,
// and their scripts, arguments and environments; bytes of unfinished requests; at most 64
// connections and 64 MiB of unread replies (daemon.cc).
constexpr size_t kMaxActiveJobsPerUser = 10000;
constexpr size_t kMaxActiveBytesPerUser = size_t(64) << 20;
constexpr size_t kMaxInboundBytesPerUser = size_t(16) << 20;

// A job as the status page, /api/status and `gpuq stats` show it: no environment, script or
// paths; with elapsed_s, gpu_hours, util_mean and its usage (daemon_usage.cc).
nlohmann::json job_brief(const Job& j, int64_t now_ms);

// What a job keeps in the daemon's memory and store beyond its fixed fields: its script,
// arguments and environment, counted against kMaxActiveBytesPerUser (daemon_ops.cc).
size_t spec_bytes(const Job& j);

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
  // Tests: check the maps against the store after recovery and every turn, and stop with an
  // error naming what is broken (daemon_invariants.cc).
  bool check_invariants = false;
};

struct SupervisorStatus;

struct Peer {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

class Daemon {
 public:
  explicit Daemon(DaemonConfig cfg);
  ~Daemon();
  int run();  // returns when SIGTERM/SIGINT arrives; running jobs keep running and are adopted
              // later

 private:
  struct Conn {
    Fd fd;
    Peer peer;
    FrameReader reader{kMaxRequestBytes};
    std::string out;
    size_t out_off = 0;
    int64_t last_ms = 0;   // the last byte read or written: a client that stops reading is dropped
    bool waiting = false;  // its request waits unread on our side: not the client's stall
  };
  struct Runner {
    pid_t pid = 0;
    Fd pidfd;
  };

  // daemon.cc: sockets and the loop
  void open_socket();
  void remove_socket() const;
  void accept_clients();
  // Reads; answers once a whole request is in (c.out). `inbound` is the bytes of its user's
  // unfinished requests, which past kMaxInboundBytesPerUser get an error instead of more reading.
  void on_readable(Conn& c, size_t& inbound);
  void answer(Conn& c);  // a whole request is in: decode, handle, reply
  bool flush(Conn& c);   // false when finished (close it)
  void reply(Conn& c, nlohmann::json r);
  void serve_clients(const std::vector<pollfd>& fds, size_t conn_base,
                     std::map<uid_t, size_t>& pending, std::map<uid_t, size_t>& inbound);
  void end_turn();        // commit the batch, start supervisors
  bool stop_requested();  // reads the signalfd

  // daemon_ops.cc: requests
  nlohmann::json handle(const Request& req, const Peer& peer);
  nlohmann::json op_submit(const SubmitRequest& req, const Peer& peer);
  Job job_from_request(const SubmitRequest& req, const Peer& peer) const;
  std::vector<Job> insert_jobs(const Job& base, const JobRequest& r, const std::string& key,
                               const std::vector<int>& indices);  // one transaction
  nlohmann::json op_queue(const Request& req, const Peer& peer);
  nlohmann::json op_show(const Request& req, const Peer& peer);
  nlohmann::json op_cancel(const Request& req, const Peer& peer);
  nlohmann::json op_hold(const Request& req, const Peer& peer, bool hold);
  nlohmann::json op_history(const Request& req, const Peer& peer);
  nlohmann::json op_drain(const Peer& peer, bool drain);
  // daemon_usage.cc: sampling and the usage requests (status, stats, report)
  nlohmann::json op_status(const Request& req);
  nlohmann::json status_gpus(const std::map<int, const Job*>& holder, int spark_points,
                             int64_t now);
  nlohmann::json op_stats(const Request& req);
  nlohmann::json op_report(const Request& req);
  void start_sampling();   // in run(), once signals are blocked (the thread must not take them)
  void publish_targets();  // running jobs' sessions, to the sampling thread
  void on_usage_ticks();   // inside the batch
  void apply_tick(const UsageSampler::Tick& t);
  // "12", "12_3" -> job ids; ids reached through a whole-array id also go into *via_array. At
  // most kMaxIdsPerRequest, an array counting as its tasks.
  std::vector<int64_t> resolve_ids(const std::vector<JobRef>& refs,
                                   std::set<int64_t>* via_array = nullptr);
  std::string pending_reason(const Job& j) const;  // squeue's (Reason)
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
  void requeue_or_fail(Job& j, const std::string& why);
  void charge(const Job& j, int64_t end_ms);
  const char* dependency_reason(const Job& j) const;  // nullptr when satisfied
  // The only ways into and out of active_: they keep each user's load (the submit bounds).
  void admit(Job j);
  void retire(int64_t id);
  // One line of the audit trail in the daemon's log: "job 12 (train, alice): started on GPUs 0,1".
  void log_event(const Job& j, const std::string& what) const;
  std::map<uint32_t, double> decayed_usage(int64_t now) const;

  // daemon_invariants.cc: what the maps below owe the store (written down there)
  std::vector<std::string> invariant_violations();
  void check_invariants(const char* when);  // throws std::logic_error when one is broken

  DaemonConfig cfg_;
  std::string run_dir_, spool_dir_, host_, boot_id_;
  std::vector<int64_t> to_spawn_;  // marked RUNNING in the current batch
  std::vector<int64_t> cleanup_;   // run files to remove once the batch is committed
  std::unique_ptr<Store> store_;
  Fd lock_fd_, listen_fd_, signal_fd_;
  std::optional<std::pair<dev_t, ino_t>> socket_file_;  // the socket file we bound
  bool as_root_ = false;
  bool draining_ = false;
  bool dirty_ = true;        // something changed: run the scheduler
  bool recovering_ = false;  // in recover(): what ended did so while no daemon watched
  std::map<int, Conn> conns_;
  // The maps from here on mirror the store; daemon_invariants.cc says exactly how.
  std::map<int64_t, Job> active_;  // pending + running, by id
  struct UserLoad {
    size_t jobs = 0, bytes = 0;  // active jobs, and their scripts, arguments and environments
  };
  std::map<uint32_t, UserLoad> load_;
  std::map<int64_t, Runner> runners_;   // running job id -> its supervisor
  std::map<int64_t, JobState> states_;  // every job's state, for dependencies
  std::map<int64_t, std::vector<int64_t>> array_members_;
  // Array id -> task id -> member id: each array's member documents are read once, at its
  // first ID_TASK lookup (or at submit), not at every one (a 10,000-task array took 0.4 s each).
  std::map<int64_t, std::map<int64_t, int64_t>> array_tasks_;
  std::optional<int64_t> array_task_member(int64_t array_id, int64_t task);
  std::optional<Job> any_job(int64_t id) const;  // active, else from the store
  struct UsageRec {
    double gpu_seconds = 0;
    int64_t updated_ms = 0;
  };
  std::map<uint32_t, UsageRec> usage_;
  std::unique_ptr<UsageSampler> sampler_;
  std::vector<UsageSampler::Target> published_targets_;
  std::optional<gpuinfo::GpuSnapshot> last_gpus_;  // the newest GPU sample, every GPU
  std::string sample_error_;                       // why the newest sample failed, if it did
  // GPU-seconds of finished jobs by user, for /metrics' counter without a scan per request.
  std::map<std::string, double> finished_gpu_seconds_;
};

}  // namespace gpurun::queue

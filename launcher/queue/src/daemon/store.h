// gpuq's durable job store: one SQLite database in WAL mode with synchronous=FULL, so a commit is
// on disk before the daemon replies (a reply means the job survives kill -9 and power loss).
// NORMAL would be enough for kill -9 alone, but the issue asks for "durable at commit" and a WAL
// commit costs one fsync of the log, well inside the submit budget. Ids come from AUTOINCREMENT, so
// an id is never handed out twice, even after the newest jobs are deleted.
//
// Schema versions (PRAGMA user_version), upgraded in place when a store is opened:
//   0  jobs(id, submit_key, state, uid, array_job_id, data), meta, usage (gpuq before issue 12)
//   1  + jobs columns user, account, start_ms, end_ms, ngpus, util_sum, util_n (copied from each
//      job's document) with covering indexes by user and by account, so reports and metrics
//      aggregate in SQL without reading documents, and
//      samples(time_ms, gpu, job_id, util, mem_used_mib, mem_total_mib, power_w, temp_c): raw GPU
//      samples of running jobs, deleted after the retention time.
//   2  + runs(job_id, user, account, start_ms, end_ms, ngpus, util_sum, util_n): the runs of jobs
//      that ended in a requeue (a job's row holds its last run), so reports, budgets and the
//      per-user counter count every run.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpurun/queue/job.h"

namespace gpurun::queue {

class Store {
 public:
  explicit Store(const std::string& path);  // creates the schema when missing
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Scoped transaction: commits in commit(), rolls back if destroyed first. Nested inside an
  // open transaction (the daemon's per-iteration batch) it is a SAVEPOINT, so a failed request
  // still leaves nothing behind.
  class Txn {
   public:
    explicit Txn(Store& s);
    ~Txn();
    void commit();

   private:
    Store& s_;
    bool nested_ = false;
    bool done_ = false;
  };

  // The daemon's batch: everything written while handling one poll iteration becomes durable
  // with one commit (one WAL fsync) before any reply is sent or any supervisor is spawned.
  void begin_batch();
  void commit_batch();
  void checkpoint();  // passive WAL checkpoint; the daemon calls it when idle

  void insert_job(Job& j);  // assigns j.id
  // The run of `j` that ended at `end_ms` in a requeue, kept before j starts afresh.
  void insert_run(const Job& j, int64_t end_ms);
  void update_job(const Job& j);
  std::vector<Job> load_active();  // PENDING and RUNNING, by id
  std::optional<Job> load_job(int64_t id);
  std::vector<Job> load_array(int64_t array_job_id);
  std::optional<int64_t> find_submit_key(const std::string& key);
  // Finished jobs, newest last: those of `uids` (empty: everyone's), at most `limit` (0 = all).
  std::vector<Job> history(const std::vector<uint32_t>& uids, size_t limit);
  int64_t count_finished(const std::vector<uint32_t>& uids);  // what history(uids, 0) would return

  struct StateRow {
    int64_t id;
    int64_t array_job_id;
    JobState state;
  };
  std::vector<StateRow> all_states();  // every job, cheap (no documents parsed)

  std::string meta(const std::string& key, const std::string& fallback);
  void set_meta(const std::string& key, const std::string& value);

  struct Usage {
    double gpu_seconds = 0;
    int64_t updated_ms = 0;
  };
  std::map<uint32_t, Usage> load_usage();
  void save_usage(uint32_t uid, const Usage& u);

  // GPU samples of running jobs; nullopt where the GPU gave no figure.
  struct Sample {
    int64_t time_ms = 0;
    int gpu = 0;
    int64_t job_id = 0;
    std::optional<double> util, mem_used_mib, mem_total_mib, power_w, temp_c;
  };
  void insert_samples(const std::vector<Sample>& rows);
  std::vector<Sample> job_samples(int64_t job_id);      // oldest first
  std::vector<Sample> samples_since(int64_t since_ms);  // every job's, oldest first
  void delete_samples_before(int64_t time_ms);

  // GPU usage per user (or account) from jobs that held GPUs between since_ms and now_ms: running
  // jobs count up to now, and a job that started before since_ms counts from since_ms (sreport).
  struct ReportRow {
    std::string key;
    int64_t jobs = 0;
    double gpu_seconds = 0;
    double util_sum = 0;
    int64_t util_samples = 0;
  };
  enum class ReportBy { kUser, kAccount };
  std::vector<ReportRow> report(int64_t since_ms, int64_t now_ms, ReportBy by);

  // GPU-hour budgets (gpuq budget set): a user's name, or "@" and an account, to its hours per
  // period ("week", "month" or "total").
  struct Budget {
    std::string subject;
    double hours = 0;
    std::string period = "total";
    int64_t set_ms = 0;
  };
  void set_budget(const Budget& b);
  void clear_budget(const std::string& subject);  // no such budget: nothing happens
  std::vector<Budget> budgets();                   // by subject

  // GPU-seconds of every finished job and every requeued run, by user (the daemon adds running
  // jobs and keeps it current).
  std::map<std::string, double> finished_gpu_seconds_by_user();

  static constexpr int kSchemaVersion = 2;
  int schema_version();

 private:
  void migrate();
  void migrate_to_1();
  void migrate_to_2();
  void exec(const char* sql);
  sqlite3_stmt* prepare(const std::string& sql);  // cached per SQL text
  std::vector<Job> query_jobs(sqlite3_stmt* st);
  std::vector<Sample> select_samples(const char* where, int64_t value);  // where: "col op ?"
  [[noreturn]] void fail(const std::string& what);

  std::string path_;
  sqlite3* db_ = nullptr;
  int depth_ = 0;
  std::map<std::string, sqlite3_stmt*> stmts_;
};

}  // namespace gpurun::queue

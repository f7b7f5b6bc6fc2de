// SQLite job store for gpuq (store.h).
#include "daemon/store.h"

#include <fmt/format.h>

#include <stdexcept>

#include "gpurun/queue/job_json.h"

namespace gpurun::queue {
namespace {
// Resets a cached statement when the scope ends, so it can be reused and holds no read lock.
struct Reset {
  sqlite3_stmt* st;
  ~Reset() {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
};
}  // namespace

Store::Store(const std::string& path) : path_(path) {
  int rc =
      sqlite3_open_v2(path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error(fmt::format("cannot open job store {}: {}", path, msg));
  }
  sqlite3_busy_timeout(db_, 5000);
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=FULL");
  // SQLite's automatic checkpoint (every 1,000 WAL pages) stays on: it keeps the WAL small and
  // reused, and a growing WAL makes every commit's fsync slower (the file size changes too). The
  // daemon also checkpoints when idle (checkpoint()), so fewer of them land inside a request.
  exec(
      "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, submit_key TEXT "
      "UNIQUE,"
      " state TEXT NOT NULL, uid INTEGER NOT NULL, array_job_id INTEGER NOT NULL DEFAULT 0,"
      " data TEXT NOT NULL)");
  exec("CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state)");
  exec("CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_job_id)");
  exec("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)");
  exec(
      "CREATE TABLE IF NOT EXISTS usage(uid INTEGER PRIMARY KEY, gpu_seconds REAL NOT NULL,"
      " updated_ms INTEGER NOT NULL)");
  exec(
      "CREATE TABLE IF NOT EXISTS budgets(subject TEXT PRIMARY KEY, hours REAL NOT NULL,"
      " period TEXT NOT NULL, set_ms INTEGER NOT NULL)");
  migrate();
}

int Store::schema_version() {
  auto* st = prepare("PRAGMA user_version");
  Reset r{st};
  if (sqlite3_step(st) != SQLITE_ROW) fail("read the schema version");
  return sqlite3_column_int(st, 0);
}

void Store::migrate() {
  const int v = schema_version();
  if (v > kSchemaVersion)
    throw std::runtime_error(fmt::format(
        "job store {} has schema version {}, newer than this gpuq's {}: run the gpuq that wrote it",
        path_, v, kSchemaVersion));
  // Each step in one transaction: a crash leaves the store as the step found it.
  if (v < 1) migrate_to_1();
  if (v < 2) migrate_to_2();
}

void Store::migrate_to_1() {
  Txn txn(*this);
  for (const char* col : {"user TEXT NOT NULL DEFAULT ''", "account TEXT NOT NULL DEFAULT ''",
                          "start_ms INTEGER NOT NULL DEFAULT 0",
                          "end_ms INTEGER NOT NULL DEFAULT 0", "ngpus INTEGER NOT NULL DEFAULT 0",
                          "util_sum REAL NOT NULL DEFAULT 0", "util_n INTEGER NOT NULL DEFAULT 0"})
    exec(fmt::format("ALTER TABLE jobs ADD COLUMN {}", col).c_str());
  exec(
      "UPDATE jobs SET user = COALESCE(json_extract(data, '$.user'), ''),"
      " account = COALESCE(json_extract(data, '$.account'), ''),"
      " start_ms = COALESCE(json_extract(data, '$.start_ms'), 0),"
      " end_ms = COALESCE(json_extract(data, '$.end_ms'), 0),"
      " ngpus = COALESCE(json_array_length(data, '$.gpus'), 0)");
  // Covering indexes: reports and the per-user counter of /metrics read only these, never the
  // job documents, so 10,000 finished jobs cost an index scan.
  exec("CREATE INDEX jobs_by_user ON jobs(user, state, start_ms, end_ms, ngpus, util_sum, util_n)");
  exec(
      "CREATE INDEX jobs_by_account ON jobs(account, state, start_ms, end_ms, ngpus, util_sum,"
      " util_n)");
  exec(
      "CREATE TABLE samples(time_ms INTEGER NOT NULL, gpu INTEGER NOT NULL,"
      " job_id INTEGER NOT NULL, util REAL, mem_used_mib REAL, mem_total_mib REAL, power_w REAL,"
      " temp_c REAL)");
  exec("CREATE INDEX samples_job ON samples(job_id, time_ms)");
  exec("CREATE INDEX samples_time ON samples(time_ms)");
  exec("PRAGMA user_version = 1");
  txn.commit();
}

void Store::migrate_to_2() {
  Txn txn(*this);
  exec(
      "CREATE TABLE runs(job_id INTEGER NOT NULL, user TEXT NOT NULL, account TEXT NOT NULL,"
      " start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL, ngpus REAL NOT NULL,"
      " util_sum REAL NOT NULL, util_n INTEGER NOT NULL)");
  exec("CREATE INDEX runs_by_end ON runs(end_ms)");
  exec("PRAGMA user_version = 2");
  txn.commit();
}

Store::~Store() {
  for (auto& [_, st] : stmts_) sqlite3_finalize(st);
  sqlite3_close(db_);
}

void Store::fail(const std::string& what) {
  throw std::runtime_error(fmt::format("job store {}: {}: {}", path_, what, sqlite3_errmsg(db_)));
}

void Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(fmt::format("job store {}: '{}': {}", path_, sql, msg));
  }
}

sqlite3_stmt* Store::prepare(const std::string& sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) return it->second;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) fail("prepare " + sql);
  stmts_[sql] = st;
  return st;
}

Store::Txn::Txn(Store& s) : s_(s) {
  nested_ = s_.depth_ > 0;
  s_.exec(nested_ ? "SAVEPOINT txn" : "BEGIN IMMEDIATE");
  s_.depth_ += 1;
}
Store::Txn::~Txn() {
  if (done_) return;
  s_.depth_ -= 1;
  char* err = nullptr;
  sqlite3_exec(s_.db_, nested_ ? "ROLLBACK TO txn; RELEASE txn" : "ROLLBACK", nullptr, nullptr,
               &err);
  sqlite3_free(err);
}
void Store::Txn::commit() {
  s_.exec(nested_ ? "RELEASE txn" : "COMMIT");
  s_.depth_ -= 1;
  done_ = true;
}

void Store::begin_batch() {
  if (depth_ != 0) throw std::logic_error("job store: batch inside a transaction");
  exec("BEGIN IMMEDIATE");
  depth_ = 1;
}

void Store::commit_batch() {
  if (depth_ != 1) throw std::logic_error("job store: commit_batch without begin_batch");
  exec("COMMIT");
  depth_ = 0;
}

namespace {
// The columns both insert_job and update_job write, bound from parameter `first` on: state,
// array_job_id, data, user, account, start_ms, end_ms, ngpus (the GPUs charged: gpu_share), util_sum,
// util_n.
void bind_job_columns(sqlite3_stmt* st, int first, const Job& j, const std::string& data) {
  sqlite3_bind_text(st, first, state_name(j.state), -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, first + 1, j.array_job_id);
  sqlite3_bind_text(st, first + 2, data.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, first + 3, j.user.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, first + 4, j.account.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, first + 5, j.start_ms);
  sqlite3_bind_int64(st, first + 6, j.end_ms);
  sqlite3_bind_double(st, first + 7, gpu_share(j));  // a shard job's share, for reports
  sqlite3_bind_double(st, first + 8, j.usage.util_sum);
  sqlite3_bind_int64(st, first + 9, j.usage.util_samples);
}
}  // namespace

void Store::insert_job(Job& j) {
  auto* st = prepare(
      "INSERT INTO jobs(submit_key, uid, state, array_job_id, data, user, account, start_ms,"
      " end_ms, ngpus, util_sum, util_n) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  Reset r{st};
  std::string data = job_to_json(j, JobView::kFull).dump();
  if (j.submit_key.empty())
    sqlite3_bind_null(st, 1);
  else
    sqlite3_bind_text(st, 1, j.submit_key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, j.uid);
  bind_job_columns(st, 3, j, data);
  if (sqlite3_step(st) != SQLITE_DONE) fail("insert job");
  j.id = sqlite3_last_insert_rowid(db_);
}

void Store::insert_run(const Job& j, int64_t end_ms) {
  auto* st = prepare(
      "INSERT INTO runs(job_id, user, account, start_ms, end_ms, ngpus, util_sum, util_n)"
      " VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
  Reset r{st};
  sqlite3_bind_int64(st, 1, j.id);
  sqlite3_bind_text(st, 2, j.user.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 3, j.account.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 4, j.start_ms);
  sqlite3_bind_int64(st, 5, end_ms);
  sqlite3_bind_double(st, 6, gpu_share(j));
  sqlite3_bind_double(st, 7, j.usage.util_sum);
  sqlite3_bind_int64(st, 8, j.usage.util_samples);
  if (sqlite3_step(st) != SQLITE_DONE) fail(fmt::format("record a run of job {}", j.id));
}

void Store::update_job(const Job& j) {
  auto* st = prepare(
      "UPDATE jobs SET state = ?1, array_job_id = ?2, data = ?3, user = ?4, account = ?5,"
      " start_ms = ?6, end_ms = ?7, ngpus = ?8, util_sum = ?9, util_n = ?10 WHERE id = ?11");
  Reset r{st};
  std::string data = job_to_json(j, JobView::kFull).dump();
  bind_job_columns(st, 1, j, data);
  sqlite3_bind_int64(st, 11, j.id);
  if (sqlite3_step(st) != SQLITE_DONE) fail(fmt::format("update job {}", j.id));
}

std::vector<Job> Store::query_jobs(sqlite3_stmt* st) {
  std::vector<Job> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
    try {
      auto doc = nlohmann::json::parse(text ? text : "");
      doc["job_id"] = id;  // the row id is the truth (the document is written before the id exists)
      out.push_back(job_from_json(doc));
    } catch (const std::exception& e) {
      throw std::runtime_error(
          fmt::format("job store {}: job {} is unreadable: {}", path_, id, e.what()));
    }
  }
  if (rc != SQLITE_DONE) fail("query jobs");
  return out;
}

std::vector<Job> Store::load_active() {
  auto* st = prepare("SELECT id, data FROM jobs WHERE state IN ('PENDING','RUNNING') ORDER BY id");
  Reset r{st};
  return query_jobs(st);
}

std::optional<Job> Store::load_job(int64_t id) {
  auto* st = prepare("SELECT id, data FROM jobs WHERE id = ?");
  Reset r{st};
  sqlite3_bind_int64(st, 1, id);
  auto v = query_jobs(st);
  if (v.empty()) return std::nullopt;
  return v.front();
}

std::vector<Job> Store::load_array(int64_t array_job_id) {
  auto* st = prepare("SELECT id, data FROM jobs WHERE array_job_id = ? ORDER BY id");
  Reset r{st};
  sqlite3_bind_int64(st, 1, array_job_id);
  return query_jobs(st);
}

std::optional<int64_t> Store::find_submit_key(const std::string& key) {
  auto* st = prepare("SELECT id FROM jobs WHERE submit_key = ?");
  Reset r{st};
  sqlite3_bind_text(st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) == SQLITE_ROW) return sqlite3_column_int64(st, 0);
  return std::nullopt;
}

namespace {
// " AND uid IN (?2, ?3, ...)" for n uids (none: ""), bound from parameter 2 on.
std::string uid_filter(size_t n) {
  if (n == 0) return "";
  std::string sql = " AND uid IN (";
  for (size_t i = 0; i < n; ++i) sql += (i ? ", ?" : "?") + std::to_string(i + 2);
  return sql + ")";
}
void bind_uids(sqlite3_stmt* st, const std::vector<uint32_t>& uids) {
  for (size_t i = 0; i < uids.size(); ++i) sqlite3_bind_int64(st, int(i) + 2, uids[i]);
}
}  // namespace

std::vector<Job> Store::history(const std::vector<uint32_t>& uids, size_t limit) {
  std::string sql =
      "SELECT id, data FROM (SELECT id, data FROM jobs WHERE state NOT IN ('PENDING','RUNNING')";
  sql += uid_filter(uids.size());
  sql += " ORDER BY id DESC";
  if (limit) sql += " LIMIT ?1";
  sql += ") ORDER BY id";
  auto* st = prepare(sql);
  Reset r{st};
  bind_uids(st, uids);
  if (limit) sqlite3_bind_int64(st, 1, static_cast<int64_t>(limit));
  return query_jobs(st);
}

int64_t Store::count_finished(const std::vector<uint32_t>& uids) {
  auto* st = prepare("SELECT COUNT(*) FROM jobs WHERE state NOT IN ('PENDING','RUNNING')" +
                     uid_filter(uids.size()));
  Reset r{st};
  bind_uids(st, uids);
  if (sqlite3_step(st) != SQLITE_ROW) fail("count finished jobs");
  return sqlite3_column_int64(st, 0);
}

void Store::checkpoint() {
  int log = 0, done = 0;
  sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
}

std::vector<Store::StateRow> Store::all_states() {
  auto* st = prepare("SELECT id, array_job_id, state FROM jobs ORDER BY id");
  Reset r{st};
  std::vector<StateRow> out;
  while (sqlite3_step(st) == SQLITE_ROW)
    out.push_back({sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                   parse_state(reinterpret_cast<const char*>(sqlite3_column_text(st, 2)))});
  return out;
}

std::string Store::meta(const std::string& key, const std::string& fallback) {
  auto* st = prepare("SELECT value FROM meta WHERE key = ?");
  Reset r{st};
  sqlite3_bind_text(st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) == SQLITE_ROW)
    return reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  return fallback;
}

void Store::set_meta(const std::string& key, const std::string& value) {
  auto* st = prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
  Reset r{st};
  sqlite3_bind_text(st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, value.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE) fail("set meta " + key);
}

std::map<uint32_t, Store::Usage> Store::load_usage() {
  auto* st = prepare("SELECT uid, gpu_seconds, updated_ms FROM usage");
  Reset r{st};
  std::map<uint32_t, Usage> out;
  while (sqlite3_step(st) == SQLITE_ROW)
    out[static_cast<uint32_t>(sqlite3_column_int64(st, 0))] = {sqlite3_column_double(st, 1),
                                                               sqlite3_column_int64(st, 2)};
  return out;
}

void Store::save_usage(uint32_t uid, const Usage& u) {
  auto* st = prepare("INSERT OR REPLACE INTO usage(uid, gpu_seconds, updated_ms) VALUES(?, ?, ?)");
  Reset r{st};
  sqlite3_bind_int64(st, 1, uid);
  sqlite3_bind_double(st, 2, u.gpu_seconds);
  sqlite3_bind_int64(st, 3, u.updated_ms);
  if (sqlite3_step(st) != SQLITE_DONE) fail("save usage");
}

namespace {
void bind_figure(sqlite3_stmt* st, int i, const std::optional<double>& v) {
  if (v)
    sqlite3_bind_double(st, i, *v);
  else
    sqlite3_bind_null(st, i);
}
std::optional<double> column_figure(sqlite3_stmt* st, int i) {
  if (sqlite3_column_type(st, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(st, i);
}
}  // namespace

void Store::insert_samples(const std::vector<Sample>& rows) {
  auto* st = prepare(
      "INSERT INTO samples(time_ms, gpu, job_id, util, mem_used_mib, mem_total_mib, power_w,"
      " temp_c) VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
  for (const auto& s : rows) {
    Reset r{st};
    sqlite3_bind_int64(st, 1, s.time_ms);
    sqlite3_bind_int(st, 2, s.gpu);
    sqlite3_bind_int64(st, 3, s.job_id);
    bind_figure(st, 4, s.util);
    bind_figure(st, 5, s.mem_used_mib);
    bind_figure(st, 6, s.mem_total_mib);
    bind_figure(st, 7, s.power_w);
    bind_figure(st, 8, s.temp_c);
    if (sqlite3_step(st) != SQLITE_DONE) fail("insert sample");
  }
}

std::vector<Store::Sample> Store::select_samples(const char* where, int64_t value) {
  auto* st = prepare(
      std::string("SELECT time_ms, gpu, job_id, util, mem_used_mib, mem_total_mib, power_w, temp_c"
                  " FROM samples WHERE ") +
      where + " ORDER BY time_ms, gpu");
  Reset r{st};
  sqlite3_bind_int64(st, 1, value);
  std::vector<Sample> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    Sample s;
    s.time_ms = sqlite3_column_int64(st, 0);
    s.gpu = sqlite3_column_int(st, 1);
    s.job_id = sqlite3_column_int64(st, 2);
    s.util = column_figure(st, 3);
    s.mem_used_mib = column_figure(st, 4);
    s.mem_total_mib = column_figure(st, 5);
    s.power_w = column_figure(st, 6);
    s.temp_c = column_figure(st, 7);
    out.push_back(s);
  }
  if (rc != SQLITE_DONE) fail("query samples");
  return out;
}

std::vector<Store::Sample> Store::job_samples(int64_t job_id) {
  return select_samples("job_id = ?", job_id);
}

std::vector<Store::Sample> Store::samples_since(int64_t since_ms) {
  return select_samples("time_ms >= ?", since_ms);
}

void Store::delete_samples_before(int64_t time_ms) {
  auto* st = prepare("DELETE FROM samples WHERE time_ms < ?");
  Reset r{st};
  sqlite3_bind_int64(st, 1, time_ms);
  if (sqlite3_step(st) != SQLITE_DONE) fail("delete old samples");
}

std::vector<Store::ReportRow> Store::report(int64_t since_ms, int64_t now_ms, ReportBy by) {
  // A run's GPU time inside [since, now]: its GPUs times the overlap of the run with the window.
  // A job's row holds its last (or current) run, runs its requeued ones; the jobs counted are
  // those with a run in the window.
  std::string sql = fmt::format(
      "SELECT {0}, COUNT(DISTINCT id), SUM(ngpus * (MIN(CASE end_ms WHEN 0 THEN ?2 ELSE end_ms"
      " END, ?2) - MAX(start_ms, ?1)) / 1000.0), SUM(util_sum), SUM(util_n) FROM ("
      "SELECT id, {0}, start_ms, end_ms, ngpus, util_sum, util_n FROM jobs WHERE state != 'PENDING'"
      " UNION ALL SELECT job_id, {0}, start_ms, end_ms, ngpus, util_sum, util_n FROM runs)"
      " WHERE start_ms > 0 AND start_ms < ?2 AND (end_ms = 0 OR end_ms > ?1)"
      " GROUP BY {0} ORDER BY 3 DESC, 1",
      by == ReportBy::kAccount ? "account" : "user");
  auto* st = prepare(sql);
  Reset r{st};
  sqlite3_bind_int64(st, 1, since_ms);
  sqlite3_bind_int64(st, 2, now_ms);
  std::vector<ReportRow> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char* key = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    out.push_back({key ? key : "", sqlite3_column_int64(st, 1), sqlite3_column_double(st, 2),
                   sqlite3_column_double(st, 3), sqlite3_column_int64(st, 4)});
  }
  if (rc != SQLITE_DONE) fail("report");
  return out;
}

void Store::set_budget(const Budget& b) {
  auto* st = prepare(
      "INSERT OR REPLACE INTO budgets(subject, hours, period, set_ms) VALUES(?, ?, ?, ?)");
  Reset r{st};
  sqlite3_bind_text(st, 1, b.subject.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(st, 2, b.hours);
  sqlite3_bind_text(st, 3, b.period.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 4, b.set_ms);
  if (sqlite3_step(st) != SQLITE_DONE) fail("set budget");
}

void Store::clear_budget(const std::string& subject) {
  auto* st = prepare("DELETE FROM budgets WHERE subject = ?");
  Reset r{st};
  sqlite3_bind_text(st, 1, subject.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE) fail("clear budget");
}

std::vector<Store::Budget> Store::budgets() {
  auto* st = prepare("SELECT subject, hours, period, set_ms FROM budgets ORDER BY subject");
  Reset r{st};
  std::vector<Budget> out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    auto text = [&](int c) {
      const char* t = reinterpret_cast<const char*>(sqlite3_column_text(st, c));
      return std::string(t ? t : "");
    };
    out.push_back({text(0), sqlite3_column_double(st, 1), text(2), sqlite3_column_int64(st, 3)});
  }
  return out;
}

std::map<std::string, double> Store::finished_gpu_seconds_by_user() {
  auto* st = prepare(
      "SELECT user, SUM(ngpus * (end_ms - start_ms) / 1000.0) FROM ("
      "SELECT user, start_ms, end_ms, ngpus FROM jobs WHERE state NOT IN ('PENDING', 'RUNNING')"
      " UNION ALL SELECT user, start_ms, end_ms, ngpus FROM runs)"
      " WHERE start_ms > 0 AND end_ms >= start_ms GROUP BY user");
  Reset r{st};
  std::map<std::string, double> out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char* user = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    out[user ? user : ""] = sqlite3_column_double(st, 1);
  }
  return out;
}

}  // namespace gpurun::queue

// Pins the usage side of gpuq without a daemon: the store's schema upgrade (a version-0 store, as
// gpuq wrote it before usage existed, opens and is upgraded in place with its figures copied),
// samples and retention, report windows, seff/sreport-shaped text, --since, the CSV header, and the
// web renderers: HTML escaping of everything users choose, no external resource, SVG plots, and
// the Prometheus exposition's escaping.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "daemon/daemon.h"
#include "gpurun/queue/job_json.h"
#include "gpurun/queue/usage_format.h"
#include "gpurun/queue/web_render.h"
#include "daemon/store.h"

using namespace gpurun::queue;

namespace {

struct TempDb {
  std::string dir;
  TempDb() {
    char tpl[] = "/tmp/gpuq-usage-test-XXXXXX";
    dir = mkdtemp(tpl);
  }
  ~TempDb() { std::filesystem::remove_all(dir); }
  std::string path() const { return dir + "/jobs.db"; }
};

void sql(const std::string& path, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

Job finished(const std::string& user, const std::string& account, std::vector<int> gpus,
             int64_t start_ms, int64_t end_ms, double util_sum, int64_t util_n) {
  Job j;
  j.uid = 1000;
  j.user = user;
  j.account = account;
  j.name = "job";
  j.state = JobState::kCompleted;
  j.gpus = std::move(gpus);
  j.start_ms = start_ms;
  j.end_ms = end_ms;
  j.usage.util_sum = util_sum;
  j.usage.util_samples = util_n;
  return j;
}

}  // namespace

TEST(UsageStore, AVersionZeroStoreIsUpgradedInPlace) {
  TempDb t;
  // The schema gpuq wrote before usage existed (store.cc at f5476b8), with one finished job.
  sql(t.path(),
      "PRAGMA journal_mode=WAL;"
      "CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, submit_key TEXT UNIQUE,"
      " state TEXT NOT NULL, uid INTEGER NOT NULL, array_job_id INTEGER NOT NULL DEFAULT 0,"
      " data TEXT NOT NULL);"
      "CREATE INDEX jobs_state ON jobs(state); CREATE INDEX jobs_array ON jobs(array_job_id);"
      "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE usage(uid INTEGER PRIMARY KEY, gpu_seconds REAL NOT NULL,"
      " updated_ms INTEGER NOT NULL);"
      "INSERT INTO jobs(state, uid, data) VALUES('COMPLETED', 1000, '{\"job_id\":1,\"uid\":1000,"
      "\"user\":\"alice\",\"name\":\"old\",\"state\":\"COMPLETED\",\"start_ms\":1000,"
      "\"end_ms\":3601000,\"gpus\":[0,1]}');");
  {
    Store s(t.path());
    EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
    auto rows = s.report(0, 10000000, Store::ReportBy::kUser);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].key, "alice");
    EXPECT_DOUBLE_EQ(rows[0].gpu_seconds, 7200.0);  // 2 GPUs x 1 hour, from the old document
    auto old = s.load_job(1);
    ASSERT_TRUE(old);
    EXPECT_EQ(old->usage.util_samples, 0);  // no usage known: "-" rather than 0%
    Job j = finished("bob", "", {3}, 5000, 6000, 0, 0);
    s.insert_job(j);
    EXPECT_EQ(j.id, 2);
  }
  Store again(t.path());  // opening an upgraded store changes nothing
  EXPECT_EQ(again.report(0, 10000000, Store::ReportBy::kUser).size(), 2u);
}

TEST(UsageStore, AStoreFromANewerGpuqIsRefused) {
  TempDb t;
  { Store s(t.path()); }
  sql(t.path(), "PRAGMA user_version = 99");
  try {
    Store s(t.path());
    FAIL() << "opened a store of schema 99";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("schema version 99, newer than this gpuq's {}",
                                                     Store::kSchemaVersion)),
              std::string::npos)
        << e.what();
  }
}

TEST(UsageStore, SamplesExpireAndReportsClipToTheWindow) {
  TempDb t;
  Store s(t.path());
  s.insert_samples({{1000, 0, 7, 50.0, 100.0, 200.0, std::nullopt, 30.0},
                    {2000, 0, 7, std::nullopt, 110.0, 200.0, 60.0, 31.0},
                    {3000, 1, 8, 10.0, 1.0, 2.0, 3.0, 4.0}});
  auto seven = s.job_samples(7);
  ASSERT_EQ(seven.size(), 2u);
  EXPECT_EQ(seven[0].util, 50.0);
  EXPECT_FALSE(seven[0].power_w.has_value());
  EXPECT_FALSE(seven[1].util.has_value());
  s.delete_samples_before(2000);
  EXPECT_EQ(s.job_samples(7).size(), 1u);
  EXPECT_EQ(s.samples_since(0).size(), 2u);

  const int64_t h = 3600 * 1000;
  Job a = finished("alice", "physics", {0, 1}, 2 * h, 10 * h, 300, 10);  // 16 GPU-h, 4 inside
  Job b = finished("bob", "chem", {2}, 9 * h, 11 * h, 90, 1);            // 2 GPU-h, all inside
  Job c = finished("carol", "physics", {3}, 1 * h, 2 * h, 0, 0);         // before the window
  Job r = finished("alice", "physics", {3}, 10 * h, 0, 40, 2);           // running: up to now
  r.state = JobState::kRunning;
  for (Job* j : {&a, &b, &c, &r}) s.insert_job(*j);
  auto users = s.report(8 * h, 12 * h, Store::ReportBy::kUser);
  ASSERT_EQ(users.size(), 2u);
  EXPECT_EQ(users[0].key, "alice");
  EXPECT_EQ(users[0].jobs, 2);
  EXPECT_DOUBLE_EQ(users[0].gpu_seconds, (4 + 2) * 3600.0);
  EXPECT_DOUBLE_EQ(users[0].util_sum / users[0].util_samples, 340.0 / 12);
  EXPECT_EQ(users[1].key, "bob");
  EXPECT_DOUBLE_EQ(users[1].gpu_seconds, 2 * 3600.0);
  auto accounts = s.report(0, 12 * h, Store::ReportBy::kAccount);
  ASSERT_EQ(accounts.size(), 2u);
  EXPECT_EQ(accounts[0].key, "physics");
  EXPECT_EQ(accounts[0].jobs, 3);
}

TEST(UsageFormat, StatsLikeSeff) {
  Job j = finished("alice", "", {0, 1}, 1000, 1000 + 600 * 1000, 3100, 100);
  j.id = 7;
  j.name = "train";
  j.usage.util_max = 45;
  j.usage.mem_max_mib = 20480;
  j.usage.cpu_seconds = 300;
  j.usage.peak_rss_bytes = int64_t{3} << 29;
  j.cpus = 2;
  nlohmann::json reply = {{"job", job_brief(j, 0)},
                          {"sample_interval_s", 10},
                          {"sample_retention_s", 7 * 86400},
                          {"samples",
                           {{1000, 0, 17.0, 1024.0, 40960.0, 61.5, 31.0},
                            {1000, 1, 45.0, 20480.0, 40960.0, nullptr, 48.0}}}};
  std::string s = format_stats(reply);
  EXPECT_NE(s.find("Job ID: 7\nJob Name: train\nUser: alice\nAccount: (none)\n"
                   "State: COMPLETED (exit code 0:0)\nGPUs: 2 (0,1)\n"
                   "Job Wall-clock time: 00:10:00\nGPU-hours: 0.33 (1200 GPU-seconds)\n"
                   "GPU Utilization: mean 31.0%, max 45.0% (100 GPU samples)\n"
                   "GPU Memory Utilized: max 20480 MiB (on one GPU)\n"
                   "  GPU 0: mean 17.0%, max 17.0%, memory max 1024 of 40960 MiB (1 samples)\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("CPU Utilized: 00:05:00\nCPU Efficiency: 25.00% of 00:20:00 core-walltime "
                   "(2 cores)\nPeak RSS: 1.50 GiB\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(samples_csv(reply["samples"]),
            "time,gpu,util,mem_used_mib,power_w,temp_c\n"
            "1970-01-01T00:00:01Z,0,17,1024,61.5,31\n"
            "1970-01-01T00:00:01Z,1,45,20480,,48\n");
  reply["job"]["usage"]["util_samples"] = 0;
  reply["sample_interval_s"] = 0;
  EXPECT_NE(format_stats(reply).find("GPU Utilization: no samples (sampling off"),
            std::string::npos);
}

TEST(UsageFormat, ReportAndSince) {
  nlohmann::json reply = {
      {"since_ms", 0},
      {"now_ms", 86400000},
      {"by", "user"},
      {"rows",
       {{{"key", "alice"}, {"jobs", 3}, {"gpu_hours", 12.5}, {"util_mean", 41.25}},
        {{"key", ""}, {"jobs", 1}, {"gpu_hours", 0.5}, {"util_mean", nullptr}}}}};
  EXPECT_EQ(format_report(reply),
            "GPU usage 1970-01-01T00:00:00Z - 1970-01-02T00:00:00Z (UTC), by user\n"
            "User               Jobs   GPU-hours  MeanUtil\n"
            "---------------- ------ ----------- ---------\n"
            "alice                 3       12.50     41.2%\n"
            "(none)                1        0.50         -\n"
            "TOTAL                 4       13.00\n");
  const int64_t now = 1800000000000;
  EXPECT_EQ(parse_since("7d", now), now - 7 * 86400000);
  EXPECT_EQ(parse_since("12h", now), now - 12 * 3600000);
  EXPECT_EQ(parse_since("30m", now), now - 30 * 60000);
  EXPECT_EQ(parse_since("2w", now), now - 14 * 86400000);
  EXPECT_EQ(parse_since("all", now), 0);
  EXPECT_GT(parse_since("2026-11-01", now), 0);
  EXPECT_GT(parse_since("2026-11-01T08:00:00", now), parse_since("2026-11-01", now));
  for (const char* bad : {"yesterday", "7", "d", "-3d", "2026-13-45", "2030-01-01", "7d "})
    EXPECT_THROW(parse_since(bad, now), std::invalid_argument) << bad;
}

namespace {
nlohmann::json status_with(const std::string& name, const std::string& user) {
  Job j = finished(user, "", {0}, 1000, 0, 0, 0);
  j.id = 5;
  j.name = name;
  j.state = JobState::kRunning;
  Job p = j;
  p.id = 6;
  p.state = JobState::kPending;
  p.gpus.clear();
  auto pending = job_brief(p, 5000);
  pending["reason"] = "Resources";
  return {{"host", "box<1>"},
          {"now_ms", 5000},
          {"draining", false},
          {"sampler", {{"interval_s", 10}, {"error", ""}, {"time_ms", 4000}, {"source", "nvml"}}},
          {"gpus",
           {{{"id", 0},
             {"state", "busy"},
             {"job", job_brief(j, 5000)},
             {"seen", true},
             {"name", "A100"},
             {"util_percent", 17.0},
             {"mem_used_mib", 1024.0},
             {"mem_total_mib", 40960.0},
             {"power_w", nullptr},
             {"temp_c", 31.0},
             {"spark", {17.0, nullptr, 18.0}}},
            {{"id", 1},
             {"state", "free"},
             {"job", nullptr},
             {"seen", false},
             {"name", ""},
             {"util_percent", nullptr},
             {"mem_used_mib", nullptr},
             {"mem_total_mib", nullptr},
             {"power_w", nullptr},
             {"temp_c", nullptr},
             {"spark", nlohmann::json::array()}}}},
          {"running", {job_brief(j, 5000)}},
          {"pending", {pending}},
          {"pending_total", 1},
          {"recent", nlohmann::json::array()},
          {"jobs_by_state", {{"RUNNING", 1}, {"PENDING", 1}}},
          {"user_gpu_seconds", {{user, 4.0}}}};
}
}  // namespace

TEST(WebRender, EverythingUsersChooseIsEscaped) {
  EXPECT_EQ(html_escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
  // Control and bidi characters are shown, not obeyed, as on a terminal.
  EXPECT_EQ(html_escape("a\x1b\r\xe2\x80\xae" "b\nc"), "a\\e\\r\\u202eb\nc");
  const std::string evil = "<script>alert('x')</script>\"><img src=x onerror=alert(1)>";
  std::string page = render_status_page(status_with(evil, "eve<b>"), 10);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("<b>"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&gt;&lt;img"),
            std::string::npos);
  EXPECT_NE(page.find("eve&lt;b&gt;"), std::string::npos);
  EXPECT_NE(page.find("box&lt;1&gt;"), std::string::npos);
  // Offline: nothing is fetched from elsewhere, and nothing runs.
  for (const char* external : {"http://", "https://", "<script", "<link", "@import", "url("})
    EXPECT_EQ(page.find(external), std::string::npos) << external;
  EXPECT_NE(page.find("<meta http-equiv=\"refresh\" content=\"10\">"), std::string::npos);
  EXPECT_NE(page.find("id=\"gpu-0\""), std::string::npos);
  EXPECT_NE(page.find("<a class=\"job-id\" href=\"/job/5\">5</a> <span class=\"user\">"),
            std::string::npos);
  EXPECT_NE(page.find("(Resources)"), std::string::npos);
  EXPECT_NE(page.find("<svg class=\"spark\""), std::string::npos);

  nlohmann::json stats = {{"job", status_with(evil, "eve")["running"][0]},
                          {"sample_interval_s", 10},
                          {"sample_retention_s", 86400},
                          {"samples",
                           {{1000, 0, 10.0, 5.0, 10.0, nullptr, nullptr},
                            {2000, 0, 20.0, 6.0, 10.0, nullptr, nullptr}}}};
  std::string job = render_job_page(stats, 10);
  EXPECT_EQ(job.find("<script"), std::string::npos);
  EXPECT_NE(job.find("<svg class=\"chart\""), std::string::npos);
  EXPECT_NE(job.find("<polyline points=\"74.0,"), std::string::npos);
  std::string err = render_error_page(404, "Not Found", "no such page: /<x>");
  EXPECT_NE(err.find("/&lt;x&gt;"), std::string::npos);
}

TEST(WebRender, SvgBreaksLinesAtMissingValues) {
  std::string s = svg_sparkline({10.0, 20.0, std::nullopt, 30.0, 40.0}, 100, 100, 20);
  size_t n = 0;
  for (size_t at = 0; (at = s.find("<polyline", at)) != std::string::npos; ++at) ++n;
  EXPECT_EQ(n, 2u) << s;
  EXPECT_NE(svg_chart({}, "u", 100.0).find("<svg"), std::string::npos);  // no data: no crash
}

TEST(WebRender, MetricsEscapeLabelValues) {
  std::string m = render_metrics(status_with("n", "we\"ird\\user\nx"));
  EXPECT_NE(m.find("gpuq_gpu_allocated{gpu=\"0\",job=\"5\",user=\"we\\\"ird\\\\user\\nx\"} 1\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("gpuq_gpu_utilization_ratio{gpu=\"0\"} 0.17\n"), std::string::npos);
  EXPECT_EQ(m.find("gpuq_gpu_utilization_ratio{gpu=\"1\"}"), std::string::npos);  // no figure
  EXPECT_NE(m.find("# TYPE gpuq_user_gpu_seconds_total counter\n"), std::string::npos);
  EXPECT_NE(m.find("gpuq_jobs{state=\"PENDING\"} 1\n"), std::string::npos);
}

// Prometheus sample values are the shortest text of the value (issue 25): 41% is 0.41, not the
// 0.41000000000000003 that 41 * 0.01 printed, and a sum of GPU-seconds shows no float noise.
TEST(WebRender, MetricsValuesHaveNoFloatNoise) {
  nlohmann::json s = status_with("n", "u");
  s["gpus"][0]["util_percent"] = 41.0;
  s["user_gpu_seconds"] = {{"u", 0.1 + 0.2}};
  std::string m = render_metrics(s);
  EXPECT_NE(m.find("gpuq_gpu_utilization_ratio{gpu=\"0\"} 0.41\n"), std::string::npos) << m;
  EXPECT_NE(m.find("gpuq_user_gpu_seconds_total{user=\"u\"} 0.3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("gpuq_gpu_memory_total_bytes{gpu=\"0\"} 42949672960\n"), std::string::npos) << m;
}

// CPU efficiency from the exact run time (issue 25): a 0.8 s job is "of 0.80 s", not "of
// 00:00:00"; a job that used more cores than -c gave is over 100% and told which -c fits.
TEST(UsageFormat, CpuEfficiencyOfShortAndBusyJobs) {
  Job j = finished("alice", "", {}, 1000, 1800, 0, 0);
  j.usage.cpu_seconds = 0.5;
  nlohmann::json reply = {{"job", job_brief(j, 0)}, {"samples", nlohmann::json::array()}};
  EXPECT_NE(format_stats(reply).find("CPU Efficiency: 62.50% of 0.80 s core-walltime (1 core)\n"),
            std::string::npos)
      << format_stats(reply);
  j = finished("alice", "", {}, 1000, 1000 + 100 * 1000, 0, 0);
  j.usage.cpu_seconds = 155;
  reply["job"] = job_brief(j, 0);
  EXPECT_NE(format_stats(reply).find("CPU Efficiency: 155.00% of 00:01:40 core-walltime (1 core): "
                                     "the job used about 1.6 cores; ask for them with -c 2\n"),
            std::string::npos)
      << format_stats(reply);
}

TEST(UsageFormat, GnuplotDrawsALinePerGpuFromItsOwnFile) {
  Job j = finished("o'neil", "", {0, 3}, 1000, 2000, 0, 0);
  j.id = 9;
  j.name = "it's";
  nlohmann::json reply = {
      {"job", job_brief(j, 0)},
      {"samples", {{1000, 0, 1.0, 2.0, 3.0, 4.0, 5.0}, {1000, 3, 1.0, 2.0, 3.0, 4.0, 5.0}}}};
  std::string gp =
      gnuplot_script(reply, {{0, "/t/gpu0.csv"}, {3, "/t/gpu3.csv"}}, "/t/o'.png", "pngcairo");
  EXPECT_NE(gp.find("set output '/t/o''.png'\n"), std::string::npos) << gp;
  EXPECT_NE(gp.find("title 'gpuq job 9 (it''s, o''neil)'"), std::string::npos) << gp;
  EXPECT_NE(gp.find("plot '/t/gpu0.csv' using 1:3 every ::1 with lines lw 2 title 'GPU 0', "
                    "'/t/gpu3.csv' using 1:3 every ::1 with lines lw 2 title 'GPU 3'\n"),
            std::string::npos)
      << gp;
  EXPECT_NE(gp.find("'/t/gpu3.csv' using 1:4 every ::1"), std::string::npos);
  EXPECT_NE(gp.find("set format x '%H:%M:%S'"), std::string::npos);  // a short job: seconds
}

// Pins Slurm-shaped output (squeue times, sacct ExitCode and truncation), the wire framing with its
// request bound, and the SQLite store (ids never reused, submit keys unique).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "gpurun/queue/format.h"
#include "gpurun/queue/job_json.h"
#include "gpurun/queue/protocol.h"
#include "daemon/store.h"

using namespace gpurun::queue;

TEST(Format, SqueueAndSacctTimes) {
  EXPECT_EQ(squeue_time(21), "0:21");
  EXPECT_EQ(squeue_time(6201), "1:43:21");
  EXPECT_EQ(squeue_time(2 * 86400 + 6201), "2-01:43:21");
  EXPECT_EQ(sacct_elapsed(21), "00:00:21");
  EXPECT_EQ(time_limit_text(0), "UNLIMITED");
  EXPECT_EQ(exit_code_text(0, 9), "0:9");
}

TEST(Format, QueueColumnsAndHistoryCells) {
  Job j;
  j.id = 12346;
  j.name = "averyverylongname";
  j.user = "dave";
  j.gpus_requested = 8;
  auto o = job_to_json(j, JobView::kPublic);
  o["reason"] = "Resources";
  std::string q = format_queue({queue_row_from_json(o, 0)}, QueueFormat::kDefault, true);
  EXPECT_EQ(q,
            "             JOBID     NAME     USER ST       TIME GPUS NODELIST(REASON)\n"
            "             12346 averyver     dave PD       0:00    8 (Resources)\n");
  j.state = JobState::kCancelled;
  j.reason = "CANCELLED by 0";
  j.exit_signal = 15;
  std::string h = format_history(nlohmann::json::array({job_to_json(j, JobView::kPublic)}), false);
  EXPECT_NE(h.find("averyvery+"), std::string::npos);  // sacct truncation
  EXPECT_NE(h.find("CANCELLED+"), std::string::npos);
  EXPECT_NE(h.find("0:15"), std::string::npos);
}

// history's GPUs column counts GPUs as queue's GPUS column and the page do (issue 25: it listed
// ids, so "2" could be one GPU or two); show names the ids, and the account (it had none).
TEST(Format, HistoryCountsGpusAndShowNamesThemWithTheAccount) {
  Job j;
  j.id = 9;
  j.name = "train";
  j.user = "alice";
  j.account = "physics";
  j.state = JobState::kCompleted;
  j.gpus = {2, 5};
  j.start_ms = 1000;
  j.end_ms = 61000;
  const std::string h =
      format_history(nlohmann::json::array({job_to_json(j, JobView::kPublic)}), false);
  EXPECT_EQ(
      h.rfind("9                 train     alice  COMPLETED      0:0   00:01:00        2     0.03",
              0),
      0u)
      << h;
  const std::string show = format_show(job_to_json(j, JobView::kPublic), 0);
  EXPECT_NE(show.find(" Account=physics\n"), std::string::npos) << show;
  EXPECT_NE(show.find(" GPUs=2,5\n"), std::string::npos) << show;
  EXPECT_EQ(show.find("WorkDir="), std::string::npos) << "a public view has no paths: " << show;
}

TEST(Protocol, FramesRoundTripInPieces) {
  std::string f = frame("{\"op\":\"ping\"}");
  FrameReader r(1024);
  for (size_t i = 0; i + 1 < f.size(); ++i) EXPECT_FALSE(r.feed(&f[i], 1));
  EXPECT_TRUE(r.feed(&f.back(), 1));
  EXPECT_EQ(r.payload(), "{\"op\":\"ping\"}");
}

TEST(Protocol, OversizedRequestIsRefusedBeforeBuffering) {
  std::string header("\xff\xff\xff\xff", 4);
  FrameReader r(kMaxRequestBytes);
  EXPECT_THROW(r.feed(header.data(), header.size()), std::runtime_error);
}

TEST(Store, IdsAreNeverReusedAndKeysAreUnique) {
  std::string dir =
      std::filesystem::temp_directory_path() / ("gpuq-store-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    Store s(dir + "/jobs.db");
    Job a;
    a.submit_key = "k#0";
    s.insert_job(a);
    Job b;
    s.insert_job(b);
    EXPECT_EQ(b.id, a.id + 1);
    EXPECT_EQ(s.find_submit_key("k#0").value(), a.id);
    Job dup;
    dup.submit_key = "k#0";
    EXPECT_THROW(s.insert_job(dup), std::runtime_error);
    b.state = JobState::kCompleted;
    s.update_job(b);
    EXPECT_EQ(s.load_active().size(), 1u);
    EXPECT_EQ(s.history({}, 0).size(), 1u);
  }
  {
    Store s(dir + "/jobs.db");  // reopened: same data, next id continues
    Job c;
    s.insert_job(c);
    EXPECT_EQ(c.id, 3);
    EXPECT_EQ(s.load_job(2)->state, JobState::kCompleted);
  }
  std::filesystem::remove_all(dir);
}

// End-to-end: GPU-hour budgets (issue 29, item 4) with a real daemon and two real Unix users
// (useradd; needs root). A job that would take its user past a budget waits with
// AssocGrpGRESMinutes while another user's job runs; raising the budget starts it; budgets
// survive kill -9; only root sets them and never for an unknown user; --enforce-budgets cancels a
// running job whose budget is spent; the page's status and /metrics show spent and left.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <array>
#include <thread>

#include "gpurun/queue/web_render.h"
#include "harness.h"

using namespace gpuq_test;

namespace {

int64_t submit_as(const TestUser& u, const Daemon& d, const std::string& args) {
  const std::string work = d.dir() + "/" + u.name();
  sh(fmt::format("mkdir -p {0} && chown {1} {0}", work, u.name()));
  Result r = u.run(fmt::format(
      "cd {} && printf \"#!/bin/sh\\nsleep 30\\n\" > job.sh && {} submit --parsable {} job.sh",
      work, d.cli(), args));
  if (r.rc != 0) throw std::runtime_error("submit as " + u.name() + " failed: " + r.err);
  return std::stoll(r.out);
}

std::string reason_of(const Daemon& d, int64_t id) {
  const auto status = d.request(R"({"op":"status"})");
  for (const auto& j : status["pending"])
    if (j["job_id"] == id) return j["reason"].get<std::string>();
  return "<not pending>";
}

}  // namespace

TEST(GpuqBudget, AJobPastItsUsersBudgetWaitsUntilTheBudgetIsRaised) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create users and run a root daemon";
  Daemon d({}, "0,1");
  TestUser alice("gba"), bob("gbb");
  Result set = d.gpuq(fmt::format("budget set {} 0.01 --per week", alice.name()));
  ASSERT_EQ(set.rc, 0) << set.err;
  EXPECT_NE(set.out.find(fmt::format("{:<20}    week       0.01       0.00       0.01",
                                     alice.name())),
            std::string::npos)
      << set.out;
  // One GPU for a minute is 0.0167 GPU-hours: past alice's 0.01, so her job waits.
  int64_t a = submit_as(alice, d, "--gres=gpu:1 --time=1");
  int64_t b = submit_as(bob, d, "--gres=gpu:1 --time=1");
  d.wait_state(b, "RUNNING", 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(reason_of(d, a), "AssocGrpGRESMinutes") << d.gpuq("queue").out << d.log();
  EXPECT_NE(d.gpuq("queue").out.find("(AssocGrpGRESMinutes)"), std::string::npos);

  d.kill9();
  d.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(reason_of(d, a), "AssocGrpGRESMinutes") << "the budget was lost in the restart";
  auto status = d.request(R"({"op":"status"})");
  ASSERT_EQ(status["budgets"].size(), 1u) << status.dump();
  EXPECT_EQ(status["budgets"][0]["subject"], alice.name());
  EXPECT_EQ(status["budgets"][0]["left_hours"], 0.01);
  const std::string metrics = gpurun::queue::render_metrics(status);
  EXPECT_NE(metrics.find(fmt::format("gpuq_budget_gpu_hours{{subject=\"{}\",period=\"week\"}} 0.01",
                                     alice.name())),
            std::string::npos)
      << metrics;
  EXPECT_NE(gpurun::queue::render_status_page(status, 0).find("<h2>Budgets</h2>"),
            std::string::npos);

  ASSERT_EQ(d.gpuq(fmt::format("budget set {} 1 --per week", alice.name())).rc, 0);
  EXPECT_EQ(d.wait_state(a, "RUNNING", 20)["user"], alice.name());
  EXPECT_EQ(d.show(b)["state"], "RUNNING") << "nothing happened to bob's job";

  Result by_bob = bob.run(fmt::format("{} budget set {} 100", d.cli(), bob.name()));
  EXPECT_NE(by_bob.rc, 0);
  EXPECT_NE(by_bob.err.find("only root or the user the gpuq daemon runs as sets budgets"),
            std::string::npos)
      << by_bob.err;
  Result nobody = d.gpuq("budget set no-such-user-gb 1");
  EXPECT_NE(nobody.rc, 0);
  EXPECT_NE(nobody.err.find("budget for 'no-such-user-gb': no such user"), std::string::npos)
      << nobody.err;
  Result bad = d.gpuq(fmt::format("budget set {} lots", alice.name()));
  EXPECT_NE(bad.err.find("'lots' is not a number of GPU-hours"), std::string::npos) << bad.err;
  // A user's review: hex was 16 hours, --per Week or year got the wire protocol's words, a uid
  // was "no such user" though queue -u takes uids.
  Result hex = d.gpuq(fmt::format("budget set {} 0x10", alice.name()));
  EXPECT_NE(hex.err.find("'0x10' is not a number of GPU-hours"), std::string::npos) << hex.err;
  Result year = d.gpuq(fmt::format("budget set {} 3 --per year", alice.name()));
  EXPECT_NE(year.err.find("gpuq budget set --per 'year': expected week, month or total"),
            std::string::npos)
      << year.err;
  ASSERT_EQ(d.gpuq(fmt::format("budget set {} 3 --per Week", alice.uid())).rc, 0);
  EXPECT_NE(d.gpuq(fmt::format("budget {}", alice.name())).out.find("week       3.00"),
            std::string::npos)
      << d.gpuq("budget").out;
  EXPECT_EQ(d.gpuq("budget set @physics 2 --per month").rc, 0);
  EXPECT_NE(d.gpuq("budget @physics").out.find("@physics"), std::string::npos);
  ASSERT_EQ(d.gpuq(fmt::format("budget clear {}", alice.name())).rc, 0);
  EXPECT_EQ(d.gpuq(fmt::format("budget {}", alice.name())).out.find(alice.name()), std::string::npos);
  for (int64_t id : {a, b}) d.gpuq(fmt::format("cancel {}", id));
}

// What a review found: with 1.2 GPU-hours left, an array of four one-hour tasks started all four
// at once (each checked against what was spent, not what the others would spend), and a job
// submitted while another ran was checked the same way. Running jobs' time limits and the jobs a
// scheduling pass lets through now count against the budget.
TEST(GpuqBudget, RunningJobsAndTheirTimeLimitsCountAgainstTheBudget) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create users and run a root daemon";
  Daemon d({}, "0,1,2,3");
  TestUser dave("gbd");
  ASSERT_EQ(d.gpuq(fmt::format("budget set {} 1.2 --per week", dave.name())).rc, 0);
  const int64_t arr = submit_as(dave, d, "--array=0-3 --gres=gpu:1 --time=60");
  d.wait_state(arr, "RUNNING", 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // a few scheduling passes
  for (int64_t t = arr + 1; t <= arr + 3; ++t)
    EXPECT_EQ(reason_of(d, t), "AssocGrpGRESMinutes") << d.gpuq("queue").out;
  const int64_t later = submit_as(dave, d, "--gres=gpu:1 --time=30");  // 1 + 0.5 > 1.2
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_EQ(reason_of(d, later), "AssocGrpGRESMinutes") << d.gpuq("queue").out;
  // A budget that holds two starts the second of the array's tasks.
  ASSERT_EQ(d.gpuq(fmt::format("budget set {} 2.5 --per week", dave.name())).rc, 0);
  d.wait_state(arr + 1, "RUNNING", 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_EQ(reason_of(d, arr + 2), "AssocGrpGRESMinutes") << d.gpuq("queue").out;
  d.gpuq(fmt::format("cancel {} {}", arr, later));
}

// Only jobs that start hold budget back: a two-GPU job waiting for GPUs (Resources) does not keep
// a one-GPU job that fits the free GPU and the budget from starting (a review found the waiting
// job's hours counted as soon as it was a candidate).
TEST(GpuqBudget, AJobWaitingForGpusHoldsNoBudgetBack) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create users and run a root daemon";
  Daemon d({}, "0,1");
  TestUser erin("gbe"), frank("gbf");
  // Frank holds one of the two GPUs for up to 10 hours: erin's one-hour job fits before his
  // ends (backfill), her two-GPU job waits for his.
  const int64_t other = submit_as(frank, d, "--gres=gpu:1 --time=600");
  d.wait_state(other, "RUNNING", 20);
  ASSERT_EQ(d.gpuq(fmt::format("budget set {} 2.5 --per week", erin.name())).rc, 0);
  const int64_t big = submit_as(erin, d, "--gres=gpu:2 --time=60");    // 2 GPU-hours
  const int64_t small = submit_as(erin, d, "--gres=gpu:1 --time=60");  // 1: 3 > 2.5 together
  d.wait_state(small, "RUNNING", 20);
  EXPECT_EQ(d.show(big)["state"], "PENDING");
  d.gpuq(fmt::format("cancel {} {} {}", other, big, small));
}

TEST(GpuqBudget, EnforcingCancelsARunningJobOnceItsBudgetIsSpent) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create users and run a root daemon";
  Daemon d({"--enforce-budgets"}, "0");
  TestUser carol("gbc");
  // 0.0005 GPU-hours is 1.8 GPU-seconds: carol's job (no time limit) starts, then runs past it.
  ASSERT_EQ(d.gpuq(fmt::format("budget set {} 0.0005", carol.name())).rc, 0);
  int64_t id = submit_as(carol, d, "--gres=gpu:1");
  d.wait_state(id, "RUNNING", 20);
  auto j = d.wait_final(id, 30);
  EXPECT_EQ(j["state"], "CANCELLED");
  EXPECT_NE(d.log().find(fmt::format("cancelled: the budget of {} is spent", carol.name())),
            std::string::npos)
      << d.log();
}

// A requeued run's GPU time counts (a user's review): the run that ended in `gpuq requeue` was
// charged to fair share only. The report, the budget's spent hours, the job's GPU-hours and the
// per-user counter lost it, and the counter went down across a restart. Now every run counts.
TEST(GpuqBudget, ARequeuedRunStillCountsInReportsBudgetsAndTheCounter) {
  Daemon d({}, "0,1");  // the daemon's owner sets budgets, as root does
  const std::string me = getpwuid(geteuid())->pw_name;
  ASSERT_EQ(d.gpuq(fmt::format("budget set {} 10 --per week", me)).rc, 0);
  d.script("twice.sh",
           "#!/bin/sh\nif [ \"$SLURM_RESTART_COUNT\" = 0 ]; then sleep 30; fi\necho done\n");
  const int64_t id = d.submit("--gres=gpu:2 twice.sh");
  d.wait_state(id, "RUNNING");
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_EQ(d.gpuq(fmt::format("requeue {}", id)).rc, 0);
  EXPECT_EQ(d.wait_final(id)["state"], "COMPLETED");
  // The first run held 2 GPUs for at least 3 s; the rerun ends at once.
  const double at_least = 2 * 3.0;
  auto gpu_seconds = [&] {
    auto st = d.request(R"({"op":"status"})");
    auto rep = nlohmann::json::parse(d.gpuq("report --since all --json").out);
    EXPECT_EQ(rep["rows"].size(), 1u) << rep.dump();
    return std::array<double, 4>{
        rep["rows"][0]["gpu_hours"].get<double>() * 3600,
        st["budgets"][0]["spent_hours"].get<double>() * 3600,
        st["user_gpu_seconds"][me].get<double>(),
        d.show(id).value("earlier_gpu_seconds", 0.0)};
  };
  const auto before = gpu_seconds();
  for (double s : before) EXPECT_GE(s, at_least) << d.log();
  d.kill9();
  d.start();
  const auto after = gpu_seconds();
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_GE(after[i], before[i]) << "figure " << i << " went down across a restart";
}

// The daemon's job table and accounting against a real store (daemon/job_table.h,
// daemon/accounting.h): what they read at start-up, each user's load, arrays, and the invariants
// each owes the store (daemon_invariants.cc), which must name a difference the moment the store
// and the mirror part.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "daemon/accounting.h"
#include "daemon/job_table.h"
#include "daemon/store.h"

using namespace gpurun::queue;

namespace {

struct TempStore {
  std::string dir;
  std::unique_ptr<Store> store;
  TempStore() {
    char tpl[] = "/tmp/gpuq-job-table-test-XXXXXX";
    dir = mkdtemp(tpl);
    store = std::make_unique<Store>(dir + "/jobs.db");
  }
  ~TempStore() {
    store.reset();
    std::filesystem::remove_all(dir);
  }
};

Job pending(uint32_t uid, const std::string& script, int64_t array = 0, int task = -1) {
  Job j;
  j.uid = uid;
  j.user = "u" + std::to_string(uid);
  j.name = "job";
  j.script = script;
  j.env = {{"HOME", "/home/x"}};
  j.array_job_id = array;
  j.array_task_id = task;
  return j;
}

// Inserts `j` into the store as a submit does, then into the table.
int64_t submit(TempStore& t, JobTable& table, Job j) {
  t.store->insert_job(j);
  const int64_t id = j.id;
  table.add_new(std::move(j));
  return id;
}

bool names(const std::vector<std::string>& violations, const std::string& lead) {
  for (const auto& v : violations)
    if (v.rfind(lead, 0) == 0) return true;
  return false;
}

}  // namespace

TEST(JobTable, ReadsTheStoresJobsAndCountsEachUsersLoad) {
  TempStore t;
  Job a = pending(1000, "#!/bin/sh\ntrue\n"), b = pending(1000, "#!/bin/sh\nsleep 1\n");
  Job c = pending(2000, "x");
  Job done = pending(2000, "y");
  done.state = JobState::kCompleted;
  for (Job* j : {&a, &b, &c, &done}) t.store->insert_job(*j);
  JobTable table(*t.store);
  EXPECT_EQ(table.active().size(), 3u);
  EXPECT_EQ(table.find(done.id), nullptr);
  EXPECT_EQ(table.states().at(done.id), JobState::kCompleted);
  EXPECT_EQ(table.load_of(1000).jobs, 2u);
  EXPECT_EQ(table.load_of(1000).bytes, spec_bytes(a) + spec_bytes(b));
  EXPECT_EQ(table.load_of(3000).jobs, 0u);
  EXPECT_TRUE(table.violations().empty());
  table.retire(a.id);
  EXPECT_EQ(table.load_of(1000).jobs, 1u);
  EXPECT_EQ(table.load_of(1000).bytes, spec_bytes(b));
}

TEST(JobTable, FindsAnArraysTasksAlsoWhenTheArrayPredatesTheTable) {
  TempStore t;
  std::vector<int64_t> ids;
  {
    JobTable first(*t.store);
    Job leader = pending(1000, "s", 0, 0);
    t.store->insert_job(leader);
    leader.array_job_id = leader.id;  // an array's id is its first task's
    t.store->update_job(leader);
    first.add_new(leader);
    ids.push_back(leader.id);
    for (int task : {4, 8}) ids.push_back(submit(t, first, pending(1000, "s", leader.id, task)));
    EXPECT_EQ(first.array_task_member(leader.id, 4), ids[1]);
    EXPECT_TRUE(first.violations().empty()) << first.violations().front();
  }
  JobTable second(*t.store);  // a restarted daemon: the task map is read at first lookup
  EXPECT_EQ(second.array_task_member(ids[0], 8), ids[2]);
  EXPECT_EQ(second.array_task_member(ids[0], 5), std::nullopt);
  EXPECT_EQ(second.array_task_ids(ids[0]), (std::vector<int>{0, 4, 8}));
  ASSERT_NE(second.array_members(ids[0]), nullptr);
  EXPECT_EQ(second.array_members(ids[0])->size(), 3u);
  EXPECT_TRUE(second.exists(ids[0]));
  EXPECT_FALSE(second.exists(ids[2] + 1));
  EXPECT_TRUE(second.violations().empty());
}

// Each way the mirror can part from the store is named, by its invariant's number.
TEST(JobTable, NamesEachDifferenceFromTheStore) {
  TempStore t;
  JobTable table(*t.store);
  const int64_t id = submit(t, table, pending(1000, "s"));
  ASSERT_TRUE(table.violations().empty());

  table.find(id)->held = true;  // changed in memory, not stored
  EXPECT_TRUE(names(table.violations(), "1: job " + std::to_string(id) + ": held differs"));
  t.store->update_job(*table.find(id));
  EXPECT_TRUE(table.violations().empty());

  Job& j = *table.find(id);  // ended in the store, its state not noted
  j.state = JobState::kCompleted;
  t.store->update_job(j);
  auto v = table.violations();
  EXPECT_TRUE(names(v, "1: job " + std::to_string(id) + " is COMPLETED in memory but not active"));
  EXPECT_TRUE(names(v, "3: "));
  table.note_state(j);
  table.retire(id);
  EXPECT_TRUE(table.violations().empty());

  Job behind = pending(2000, "t");  // stored behind the table's back
  t.store->insert_job(behind);
  v = table.violations();
  EXPECT_TRUE(names(v, "1: job " + std::to_string(behind.id) + " is PENDING in the store"));
  EXPECT_TRUE(names(v, "3: "));
  table.admit(behind);  // active again, but its state still unknown to the table
  v = table.violations();
  EXPECT_FALSE(names(v, "1: "));
  EXPECT_TRUE(names(v, "3: "));
}

TEST(Accounting, ChargesGpuTimeDecayedAndKeepsItInTheStore) {
  TempStore t;
  JobTable table(*t.store);
  const int64_t half_life_s = 3600;
  Accounting acct(*t.store, half_life_s);
  Job j = pending(1000, "s");
  j.state = JobState::kRunning;
  j.gpus = {0, 1};
  j.start_ms = 1'000'000;
  acct.charge(j, 1'000'000 + 100'000, 2'000'000);  // 2 GPUs for 100 s
  EXPECT_DOUBLE_EQ(acct.decayed(table, 2'000'000).at(1000), 200.0);
  EXPECT_NEAR(acct.decayed(table, 2'000'000 + half_life_s * 1000).at(1000), 100.0, 1e-9);
  EXPECT_DOUBLE_EQ(acct.gpu_seconds_by_user(table, 2'000'000).at("u1000"), 200.0);
  EXPECT_TRUE(acct.violations().empty());
  Accounting reread(*t.store, half_life_s);  // a restarted daemon reads the same usage
  EXPECT_DOUBLE_EQ(reread.decayed(table, 2'000'000).at(1000), 200.0);

  t.store->save_usage(1000, {5.0, 2'000'000});  // the store changed behind its back
  EXPECT_EQ(acct.violations(), std::vector<std::string>{
                                   "8: the fair-share usage differs from the store's"});
}

// User 1000's job, running on GPU 3 since 10 s; its id.
int64_t submit_running(TempStore& t, JobTable& table) {
  Job j = pending(1000, "s");
  j.state = JobState::kRunning;
  j.gpus = {3};
  j.start_ms = 10'000;
  return submit(t, table, j);
}

TEST(Accounting, RunningJobsCountWhileTheyRun) {
  TempStore t;
  JobTable table(*t.store);
  Accounting acct(*t.store, 3600);
  submit_running(t, table);
  EXPECT_DOUBLE_EQ(acct.decayed(table, 40'000).at(1000), 30.0);  // 1 GPU, 30 s so far
  EXPECT_DOUBLE_EQ(acct.gpu_seconds_by_user(table, 40'000).at("u1000"), 30.0);
}

// /metrics' counter never goes down (a lab admin's review): a look at 40 s counted the running
// job up to then, and the job, which ended at 25 s by its supervisor's clock, is charged 15 s.
// Prometheus would read the drop as a reset and count the user's whole total again.
TEST(Accounting, TheCounterNeverGoesDown) {
  TempStore t;
  JobTable table(*t.store);
  Accounting acct(*t.store, 3600);
  const int64_t id = submit_running(t, table);
  EXPECT_DOUBLE_EQ(acct.gpu_seconds_by_user(table, 40'000).at("u1000"), 30.0);
  Job& ended = *table.find(id);
  acct.charge(ended, 25'000, 41'000);
  ended.state = JobState::kCompleted;
  ended.end_ms = 25'000;
  t.store->update_job(ended);
  table.note_state(ended);
  table.retire(ended.id);
  EXPECT_DOUBLE_EQ(acct.gpu_seconds_by_user(table, 41'000).at("u1000"), 30.0);
}

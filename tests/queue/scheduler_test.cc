// Pins gpuq's scheduling order (priority, fair share, submit time), exclusive GPU choice, the
// per-user GPU limit and EASY backfill.
#include "gpurun/queue/scheduler.h"

#include <gtest/gtest.h>

using namespace gpurun::queue;

namespace {
SchedJob job(int64_t id, int gpus, uint32_t uid = 1, int64_t limit_s = 0, int prio = 0) {
  SchedJob j;
  j.id = id;
  j.uid = uid;
  j.priority = prio;
  j.gpus = gpus;
  j.time_limit_s = limit_s;
  j.submit_ms = id * 10;
  return j;
}
std::string reason(const SchedOutput& out, int64_t id) {
  for (const auto& [j, r] : out.reasons)
    if (j == id) return r;
  return "<none>";
}
}  // namespace

TEST(Scheduler, StartsInSubmitOrderOnFreeGpus) {
  SchedInput in;
  in.free_gpus = {3, 1, 0, 2};
  in.waiting = {job(1, 2), job(2, 1), job(3, 2)};
  auto out = schedule(in);
  ASSERT_EQ(out.starts.size(), 2u);
  EXPECT_EQ(out.starts[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(out.starts[1].gpus, (std::vector<int>{2}));
  EXPECT_EQ(reason(out, 3), "Resources");
}

TEST(Scheduler, AJobThatFitsButForGpusUsedOutsideTheQueueSaysSo) {
  SchedInput in;
  in.free_gpus = {1};
  in.gpus_outside = 1;  // GPU 0: someone's process, not a job's
  in.waiting = {job(1, 2), job(2, 3)};
  auto out = schedule(in);
  EXPECT_TRUE(out.starts.empty());
  EXPECT_EQ(reason(out, 1), "GpuBusyOutsideQueue");
  EXPECT_EQ(reason(out, 2), "Priority");
  in.waiting = {job(2, 3)};  // would not fit even with GPU 0: the queue's own resources
  EXPECT_EQ(reason(schedule(in), 2), "Resources");
}

TEST(Scheduler, PriorityThenFairShareThenSubmitTime) {
  SchedInput in;
  in.free_gpus = {0};
  in.usage = {{1, 1000.0}, {2, 10.0}};
  in.waiting = {job(1, 1, 1), job(2, 1, 2)};
  EXPECT_EQ(schedule(in).starts.at(0).job_id, 2);  // user 2 used less
  in.waiting[0].priority = 5;
  EXPECT_EQ(schedule(in).starts.at(0).job_id, 1);  // priority first
}

TEST(Scheduler, PerUserGpuLimit) {
  SchedInput in;
  in.free_gpus = {0, 1, 2};
  in.max_gpus_per_user = 2;
  in.running = {{1, 7, 0}};
  in.waiting = {job(1, 1, 7), job(2, 1, 7), job(3, 1, 8)};
  auto out = schedule(in);
  ASSERT_EQ(out.starts.size(), 2u);
  EXPECT_EQ(out.starts[0].job_id, 1);
  EXPECT_EQ(out.starts[1].job_id, 3);
  EXPECT_EQ(reason(out, 2), "QOSMaxGRESPerUser");
}

TEST(Scheduler, BackfillOnlyWhenTheTopJobIsNotDelayed) {
  SchedInput in;
  in.now_ms = 0;
  in.free_gpus = {2, 3};
  in.running = {{2, 1, 100000}};  // GPUs 0,1 free at t = 100 s
  // Top job needs 4 GPUs: reserved at t = 100 s, with 0 spare GPUs then.
  in.waiting = {job(1, 4), job(2, 1, 1, 50), job(3, 1, 1, 500), job(4, 1, 1, 0)};
  auto out = schedule(in);
  ASSERT_EQ(out.starts.size(), 1u);
  EXPECT_EQ(out.starts[0].job_id, 2);  // ends at 50 s, before the reservation
  EXPECT_EQ(reason(out, 1), "Resources");
  EXPECT_EQ(reason(out, 3), "Priority");  // would still run at 100 s
  EXPECT_EQ(reason(out, 4), "Priority");  // no limit: could run forever
}

TEST(Scheduler, BackfillUsesGpusTheTopJobWillNotNeed) {
  SchedInput in;
  in.free_gpus = {2, 3};
  in.running = {{2, 1, 100000}};
  in.waiting = {job(1, 3), job(2, 1, 1, 0), job(3, 1, 1, 0)};
  auto out = schedule(in);  // at 100 s: 4 free, top needs 3 -> one spare GPU
  ASSERT_EQ(out.starts.size(), 1u);
  EXPECT_EQ(out.starts[0].job_id, 2);
  EXPECT_EQ(reason(out, 3), "Priority");
}

TEST(Scheduler, NoBackfillBehindAJobThatMayWaitForever) {
  SchedInput in;
  in.free_gpus = {3};
  in.running = {{3, 1, 0}};  // no time limit
  in.waiting = {job(1, 4), job(2, 1, 1, 10)};
  EXPECT_TRUE(schedule(in).starts.empty());
}

TEST(Scheduler, CpuOnlyJobsAlwaysFit) {
  SchedInput in;
  in.waiting = {job(1, 0), job(2, 0)};
  EXPECT_EQ(schedule(in).starts.size(), 2u);
}

TEST(Scheduler, DecayHalvesPerHalfLife) {
  EXPECT_DOUBLE_EQ(decay_usage(100.0, 1000, 1000), 50.0);
  EXPECT_DOUBLE_EQ(decay_usage(100.0, 0, 1000), 100.0);
}

namespace {
SchedJob shard_job(int64_t id, int shards, int64_t limit_s = 0) {
  SchedJob j = job(id, 0, 1, limit_s);
  j.shards = shards;
  return j;
}
}  // namespace

TEST(Scheduler, FourShardJobsShareOneGpuWhileAWholeGpuJobWaits) {
  SchedInput in;
  in.free_gpus = {0};
  in.shards_total = {{0, 4}};
  in.waiting = {shard_job(1, 1), shard_job(2, 1), shard_job(3, 1), shard_job(4, 1), job(5, 1),
                shard_job(6, 1)};
  auto out = schedule(in);
  ASSERT_EQ(out.starts.size(), 4u);
  for (const auto& s : out.starts) EXPECT_EQ(s.gpus, std::vector<int>{0}) << s.job_id;
  EXPECT_EQ(reason(out, 5), "Resources");
  EXPECT_EQ(reason(out, 6), "Priority") << "no fifth shard";
  // While any shard is held, the GPU is not whole: the gpu:1 job waits; once none is, it starts.
  in.free_gpus = {};
  in.shards_held = {{0, 1}};
  in.waiting = {job(5, 1)};
  EXPECT_TRUE(schedule(in).starts.empty());
  in.free_gpus = {0};
  in.shards_held = {};
  EXPECT_EQ(schedule(in).starts.at(0).gpus, std::vector<int>{0});
}

TEST(Scheduler, ShardJobsFillASharedGpuBeforeOpeningAWholeOne) {
  SchedInput in;
  in.free_gpus = {1, 2};
  in.shards_total = {{0, 4}, {1, 4}, {2, 2}};
  in.shards_held = {{0, 3}};  // GPU 0: one shard left
  in.waiting = {shard_job(1, 1), shard_job(2, 2), shard_job(3, 3), shard_job(4, 4)};
  auto out = schedule(in);
  // Job 1 takes GPU 0's last shard (fill before opening); job 2 opens GPU 1 (the lowest free GPU
  // with room); job 3 needs 3: GPU 1 has 2 left and GPU 2 offers only 2, so it waits; job 4 (4
  // shards) fits nowhere either.
  ASSERT_EQ(out.starts.size(), 2u);
  EXPECT_EQ(out.starts[0].gpus, std::vector<int>{0});
  EXPECT_EQ(out.starts[1].gpus, std::vector<int>{1});
  EXPECT_EQ(reason(out, 3), "Resources");
}

TEST(Scheduler, AShardJobNeverGetsAWholeJobsGpuNorAGpuWithoutShards) {
  SchedInput in;
  in.free_gpus = {1};  // GPU 0 is a whole job's; GPU 1 offers no shards
  in.shards_total = {{0, 4}};
  in.waiting = {shard_job(1, 1)};
  auto out = schedule(in);
  EXPECT_TRUE(out.starts.empty());
  EXPECT_EQ(reason(out, 1), "Resources");
}

TEST(Scheduler, AMigProfileTakesOnlyDevicesOfItAndPlainJobsTakeWholeGpusFirst) {
  SchedInput in;
  in.free_gpus = {1011, 1, 1010, 1012};
  in.profiles = {{1010, "3g.40gb"}, {1011, "1g.10gb"}, {1012, "1g.10gb"}};
  SchedJob small = job(1, 2);
  small.profile = "1g.10gb";
  SchedJob big = job(2, 1);
  big.profile = "3g.40gb";
  SchedJob none = job(4, 1);
  none.profile = "2g.20gb";
  in.waiting = {small, big, job(3, 1), none};
  auto out = schedule(in);
  ASSERT_EQ(out.starts.size(), 3u);
  EXPECT_EQ(out.starts[0].gpus, (std::vector<int>{1011, 1012}));
  EXPECT_EQ(out.starts[1].gpus, std::vector<int>{1010});
  EXPECT_EQ(out.starts[2].gpus, std::vector<int>{1}) << "a plain job gets the whole GPU";
  EXPECT_EQ(reason(out, 4), "Resources");
}

TEST(Scheduler, EstimatesEachWaitingJobsPositionAndStart) {
  SchedInput in;
  in.now_ms = 1'000'000;
  in.free_gpus = {3};
  in.running = {{1, 1, 1'000'000 + 600'000}, {2, 1, 1'000'000 + 1'200'000}, {1, 1, 0}};
  // Job 1 (1 GPU, 10 min) starts now on GPU 3. At +10 min it and the first running job end: job
  // 2 (2 GPUs, 30 min) gets both. At +20 min the second running job ends: job 3 (1 GPU, no
  // limit) gets that one, for good. Job 4 (4 GPUs) never: one GPU runs a job without a limit.
  in.waiting = {job(1, 1, 1, 600), job(2, 2, 1, 1800), job(3, 1, 1, 0), job(4, 4, 1, 60)};
  SchedOutput out = schedule(in);
  ASSERT_EQ(out.starts.size(), 1u);
  auto est = estimate_starts(in, out);
  ASSERT_EQ(est.size(), 3u);
  EXPECT_EQ(est[0].job_id, 2);
  EXPECT_EQ(est[0].position, 1);
  EXPECT_EQ(est[0].start_ms, 1'000'000 + 600'000);
  EXPECT_EQ(est[1].job_id, 3);
  EXPECT_EQ(est[1].position, 2);
  EXPECT_EQ(est[1].start_ms, 1'000'000 + 1'200'000);
  EXPECT_EQ(est[2].job_id, 4);
  EXPECT_EQ(est[2].start_ms, 0) << "4 GPUs are never free: one runs without a limit";
}

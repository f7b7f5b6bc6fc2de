// GpuWatch (daemon/gpu_watch.h) on made-up samples: which processes are outside the queue, what
// changes between samples, the idle run of a held GPU and its rebuilding from stored samples, the
// busy flag, and what a sample that cannot list processes leaves in place.
#include "daemon/gpu_watch.h"

#include <gtest/gtest.h>

using namespace gpurun::queue;

namespace {

UsageSampler::Tick tick(int64_t ms, std::vector<std::pair<int, double>> utils,
                        std::vector<UsageSampler::GpuUse> uses = {}, bool listed = true) {
  UsageSampler::Tick t;
  t.time_ms = ms;
  t.gpus.emplace();
  for (auto [g, u] : utils) {
    gpurun::gpuinfo::GpuSample s;
    s.index = g;
    s.util_percent = u;
    s.mem_used_mib = 0;
    s.mem_total_mib = 1000;
    t.gpus->gpus.push_back(s);
  }
  t.gpus->processes_read = listed;
  t.gpu_uses = std::move(uses);
  return t;
}

UsageSampler::GpuUse use(int gpu, int pid, int64_t job = 0) {
  UsageSampler::GpuUse u;
  u.process.gpu = gpu;
  u.process.pid = pid;
  u.job_id = job;
  return u;
}

}  // namespace

TEST(GpuWatch, ProcessesNotOwnedByTheJobHoldingTheGpuAreOutside) {
  GpuWatch w({});
  GpuWatch::Holders holder = {{0, {7}}};
  // GPU 0: job 7's own process and job 8's (which holds no GPU 0); GPU 1: nobody's. Shard jobs
  // 20 and 21 share GPU 2, each with its process.
  holder[2] = {20, 21};
  auto changed = w.on_sample(
      tick(1000, {{0, 50}, {1, 0}}, {use(0, 10, 7), use(0, 11, 8), use(1, 12), use(2, 13, 20), use(2, 14, 21)}),
      holder);
  EXPECT_EQ(changed, (std::set<int>{0, 1}));
  ASSERT_EQ(w.outside(0).size(), 1u);
  EXPECT_EQ(w.outside(0)[0].process.pid, 11);
  EXPECT_TRUE(w.keeps_out(1));
  EXPECT_TRUE(w.processes_known());
  EXPECT_EQ(w.processes_ms(), 1000);
  EXPECT_TRUE(w.on_sample(tick(2000, {{0, 50}, {1, 0}}, {use(0, 11, 8), use(1, 12)}), holder).empty())
      << "nothing changed";
  // A sample that cannot list the processes keeps GPU 1 out and says nothing is known.
  EXPECT_TRUE(w.on_sample(tick(3000, {{1, 0}}, {}, false), holder).empty());
  EXPECT_TRUE(w.keeps_out(1));
  EXPECT_FALSE(w.processes_known());
  EXPECT_EQ(w.on_sample(tick(4000, {{1, 0}}, {}), holder), (std::set<int>{0, 1}));
  EXPECT_FALSE(w.keeps_out(1));
  GpuWatch ignore({false});
  ignore.on_sample(tick(1000, {{1, 0}}, {use(1, 12)}), {});
  EXPECT_EQ(ignore.outside(1).size(), 1u);
  EXPECT_FALSE(ignore.keeps_out(1)) << "ignore shows the process but keeps nothing out";
}

TEST(GpuWatch, AnIdleRunStartsBelowTheThresholdAndBreaksAtOrAboveIt) {
  GpuWatchConfig c;
  c.idle_percent = 5;
  c.idle_after_ms = 10'000;
  GpuWatch w(c);
  GpuWatch::Holders holder = {{0, {7}}};
  w.on_sample(tick(1000, {{0, 50}}), holder);
  EXPECT_FALSE(w.low_since(0));
  w.on_sample(tick(2000, {{0, 4.9}}), holder);
  w.on_sample(tick(3000, {{0, 0}}), holder);
  EXPECT_EQ(w.low_since(0), 2000);
  EXPECT_FALSE(w.idle_flag(0, 11'999));
  EXPECT_TRUE(w.idle_flag(0, 12'000));
  UsageSampler::Tick no_figure = tick(4000, {});
  gpurun::gpuinfo::GpuSample s;
  s.index = 0;  // utilisation unknown: neither breaks nor starts a run
  no_figure.gpus->gpus.push_back(s);
  w.on_sample(no_figure, holder);
  EXPECT_EQ(w.low_since(0), 2000);
  w.on_sample(tick(5000, {{0, 5}}), holder);
  EXPECT_FALSE(w.low_since(0)) << "5% is not below 5%";
  w.on_sample(tick(6000, {{0, 1}}), holder);
  EXPECT_EQ(w.low_since(0), 6000);
  w.on_sample(tick(7000, {{0, 1}}), {{0, {9}}});  // another job holds it now: a new run
  EXPECT_EQ(w.low_since(0), 7000);
  w.on_sample(tick(8000, {{0, 1}}), {});
  EXPECT_FALSE(w.low_since(0)) << "a GPU no job holds has no idle run";
  w.on_sample(tick(9000, {{0, 1}}), {{0, {9, 10}}});
  EXPECT_FALSE(w.low_since(0)) << "a GPU shard jobs share has no one job's idle run";
}

TEST(GpuWatch, TheIdleRunIsRebuiltFromStoredSamples) {
  EXPECT_EQ(low_run_start({{1, 50.0}, {2, 1.0}, {3, std::nullopt}, {4, 2.0}}, 5), 2);
  EXPECT_EQ(low_run_start({{1, 1.0}, {2, 1.0}}, 5), 1);
  EXPECT_FALSE(low_run_start({{1, 1.0}, {2, 9.0}}, 5));
  EXPECT_FALSE(low_run_start({{1, std::nullopt}}, 5));
  EXPECT_FALSE(low_run_start({}, 5));
}

TEST(GpuWatch, BusyWithoutAJob) {
  GpuWatchConfig c;
  c.busy_percent = 5;
  GpuWatch w(c);
  gpurun::gpuinfo::GpuSample s;
  s.util_percent = 4;
  s.mem_used_mib = 49;
  s.mem_total_mib = 1000;
  EXPECT_FALSE(w.busy_flag(0, &s, false));
  s.mem_used_mib = 50;  // 5% of its memory
  EXPECT_TRUE(w.busy_flag(0, &s, false));
  EXPECT_FALSE(w.busy_flag(0, &s, true)) << "a held GPU is busy with its job";
  s.mem_used_mib = 0;
  s.util_percent = 93;
  EXPECT_TRUE(w.busy_flag(0, &s, false));
  EXPECT_FALSE(w.busy_flag(0, nullptr, false));
  w.on_sample(tick(1, {}, {use(0, 12)}), {});
  EXPECT_TRUE(w.busy_flag(0, nullptr, false)) << "a process outside the queue makes it busy";
}

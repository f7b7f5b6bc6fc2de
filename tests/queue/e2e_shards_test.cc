// End-to-end: sharing a GPU (issue 30, item 1) with a real daemon: `gpuq daemon --shards-per-gpu 4`
// runs four --gres=shard:1 jobs at once on one GPU while a --gres=gpu:1 job waits for it whole,
// through a daemon kill -9 (nothing lost, nothing run twice, invariants checked every turn); each
// shard job sees its GPU and its share (GPUQ_GPU_MEMORY_FRACTION, SLURM_SHARDS_ON_NODE), and is
// charged the share it held.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "harness.h"

using namespace gpuq_test;

namespace {

// Writes what the job saw, then waits for the file `go` (so the test decides when jobs end).
const char* kShardScript =
    "#!/bin/sh\n"
    "echo \"$CUDA_VISIBLE_DEVICES $GPUQ_GPU_MEMORY_FRACTION $SLURM_SHARDS_ON_NODE\" >> "
    "seen.$SLURM_JOB_ID\n"
    "while [ ! -e go ]; do sleep 0.1; done\n"
    "sleep 1\n";

}  // namespace

TEST(GpuqShards, FourShardJobsShareAGpuWhileAWholeGpuJobWaits) {
  Daemon d({"--shards-per-gpu", "4", "--check-invariants"}, "0");
  d.script("job.sh", kShardScript);
  std::vector<int64_t> shard;
  for (int i = 0; i < 4; ++i) shard.push_back(d.submit("--gres=shard:1 job.sh"));
  int64_t whole = d.submit("--gres=gpu:1 job.sh");
  for (int64_t id : shard) d.wait_state(id, "RUNNING", 20);
  Result q = d.gpuq("queue --noheader");
  EXPECT_NE(q.out.find("(Resources)"), std::string::npos) << q.out;
  EXPECT_EQ(d.show(whole)["state"], "PENDING");

  d.kill9();  // the shards held are the running jobs', in the store: nothing to rebuild
  d.start();
  for (int64_t id : shard) EXPECT_EQ(d.show(id)["state"], "RUNNING") << id;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(d.show(whole)["state"], "PENDING") << "a whole-GPU job started while shards were held";
  auto status = d.request(R"({"op":"status"})");
  EXPECT_EQ(status["gpus"][0]["state"], "shared");
  EXPECT_EQ(status["gpus"][0]["shards"]["held"], 4);
  EXPECT_EQ(status["gpus"][0]["shards"]["jobs"].size(), 4u);

  std::ofstream(d.dir() + "/go").flush();
  for (int64_t id : shard) EXPECT_EQ(d.wait_final(id, 30)["state"], "COMPLETED") << d.log();
  EXPECT_EQ(d.wait_final(whole, 30)["state"], "COMPLETED") << d.log();
  for (int64_t id : shard) {
    EXPECT_EQ(read_text(fmt::format("{}/seen.{}", d.dir(), id)), "0 0.25 1\n")
        << "shard job " << id << " ran other than once, or saw other than GPU 0 and a quarter";
    auto stats = nlohmann::json::parse(d.gpuq(fmt::format("stats --json {}", id)).out);
    double hours = stats["job"]["gpu_hours"].get<double>();
    double run_s = (stats["job"]["end_ms"].get<int64_t>() - stats["job"]["start_ms"].get<int64_t>()) / 1000.0;
    EXPECT_NEAR(hours * 3600, run_s * 0.25, 0.01) << "a shard job is charged its quarter";
  }
  EXPECT_EQ(read_text(fmt::format("{}/seen.{}", d.dir(), whole)), "0  \n");
  // `gpuq report` (the store's own sum) charges the same shares as the jobs' figures.
  double expected = 0;
  for (int64_t id : shard)
    expected += nlohmann::json::parse(d.gpuq(fmt::format("stats --json {}", id)).out)["job"]["gpu_hours"].get<double>();
  expected += nlohmann::json::parse(d.gpuq(fmt::format("stats --json {}", whole)).out)["job"]["gpu_hours"].get<double>();
  auto report = d.request(R"({"op":"report","since_ms":0,"by":"user"})");
  ASSERT_EQ(report["rows"].size(), 1u) << report.dump();
  EXPECT_NEAR(report["rows"][0]["gpu_hours"].get<double>(), expected, 1e-6) << report.dump();
  EXPECT_EQ(d.log().find("invariants broken"), std::string::npos) << d.log();
}

TEST(GpuqShards, ShardsAreRefusedWhereNoGpuOffersThem) {
  Daemon d({}, "0,1");
  const std::string job = d.script("job.sh", "#!/bin/sh\ntrue\n");
  Result r = d.gpuq("submit --gres=shard:1 " + job);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("this gpuq pool shares no GPU (gpuq daemon --shards-per-gpu N"),
            std::string::npos)
      << r.err;
  Daemon some({"--shards-per-gpu", "1:2"}, "0,1");
  const std::string some_job = some.script("job.sh", "#!/bin/sh\ntrue\n");
  r = some.gpuq("submit --gres=shard:3 " + some_job);
  EXPECT_NE(r.err.find("no GPU of this pool offers 3 shards (the most is 2)"), std::string::npos)
      << r.err;
  int64_t id = some.submit("--gres=shard:2 job.sh");
  EXPECT_EQ(some.wait_final(id, 20)["gpus"], nlohmann::json::array({1})) << "GPU 0 offers none";
  Result bad = sh(some.cli() + " daemon --gpus 0 --shards-per-gpu 7:2 --state-dir " + some.dir() +
                  "/x --socket " + some.dir() + "/x.sock");
  EXPECT_NE(bad.err.find("'7:2' is not ID:N for a GPU of the pool (0)"), std::string::npos)
      << bad.err;
}

// --mps with a stand-in nvidia-cuda-mps-control (no GPU or driver here) that logs each call: one
// `-d` for the shared GPU when its first shard job starts, with CUDA_VISIBLE_DEVICES and the pipe
// directory set; `quit` on its standard input once the last shard job there has ended; each job
// gets the pipe directory and its share of the SMs.
TEST(GpuqShards, MpsStartsOncePerSharedGpuAndQuitsAfterItsLastShardJob) {
  TempDir tmp;
  const std::string log = tmp.path() + "/mps.log";
  const std::string control = tmp.path() + "/nvidia-cuda-mps-control";
  std::ofstream(control) << "#!/bin/sh\nin=$(cat)\necho \"args=$* gpu=$CUDA_VISIBLE_DEVICES "
                            "pipe=$CUDA_MPS_PIPE_DIRECTORY in=$in\" >> "
                         << log << "\n";
  ASSERT_EQ(sh("chmod 755 " + control).rc, 0);
  Daemon d({"--shards-per-gpu", "2", "--mps", control}, "0,1");
  d.script("job.sh",
           "#!/bin/sh\necho \"$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $CUDA_MPS_PIPE_DIRECTORY\" > "
           "seen.$SLURM_JOB_ID\nwhile [ ! -e go ]; do sleep 0.1; done\n");
  int64_t a = d.submit("--gres=shard:1 job.sh"), b = d.submit("--gres=shard:1 job.sh");
  d.wait_state(a, "RUNNING", 20);
  d.wait_state(b, "RUNNING", 20);
  const std::string pipe = d.dir() + "/state/mps/0/pipe";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the stand-in is not waited for
  EXPECT_EQ(read_text(log), fmt::format("args=-d gpu=0 pipe={} in=\n", pipe)) << d.log();
  std::ofstream(d.dir() + "/go").flush();
  d.wait_final(a, 20);
  d.wait_final(b, 20);
  for (int i = 0; i < 50 && lines(read_text(log)).size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(read_text(log), fmt::format("args=-d gpu=0 pipe={0} in=\nargs= gpu=0 pipe={0} in=quit\n",
                                        pipe))
      << d.log();
  for (int64_t id : {a, b})
    EXPECT_EQ(read_text(fmt::format("{}/seen.{}", d.dir(), id)), "50 " + pipe + "\n") << id;
  Result bad = sh(d.cli() + " daemon --gpus 0 --shards-per-gpu 2 --mps /nonexistent/mps --state-dir " +
                  tmp.path() + "/x --socket " + tmp.path() + "/x.sock");
  EXPECT_NE(bad.err.find("--mps: /nonexistent/mps not found"), std::string::npos) << bad.err;
  bad = sh(d.cli() + " daemon --gpus 0 --mps " + control + " --state-dir " + tmp.path() +
           "/x --socket " + tmp.path() + "/x.sock");
  EXPECT_NE(bad.err.find("--mps: no GPU is shared"), std::string::npos) << bad.err;
}

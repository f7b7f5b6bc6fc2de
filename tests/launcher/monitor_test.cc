// monitor_test.cc: gpurun --monitor's pieces (launcher/src/monitor/monitor.h): which sampled GPUs are the
// job's and whose, the sampling thread against fake nvidia-smi scripts (fixtures/nvidia-smi; no
// GPU here, the scripts stand in for the driver), the CSV rows, the per-node summary and the
// straggler rule, and the control messages that carry samples.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gpurun/common/posix.h"
#include "monitor/monitor.h"

namespace gpurun::launcher::monitor {
namespace {

std::string fixture(const std::string& name) {
  return std::string(GPURUN_FIXTURES) + "/nvidia-smi/" + name;
}

gpuinfo::GpuSample gpu(int index, int mig, std::string uuid, std::optional<double> util) {
  gpuinfo::GpuSample g;
  g.index = index;
  g.mig = mig;
  g.uuid = std::move(uuid);
  g.util_percent = util;
  g.mem_used_mib = 100.0 * (index + 1);
  return g;
}

// Waits (bounded) until the sampler has `n` messages; returns them.
std::vector<control::ToSupervisor> wait_for(NodeSampler& s, std::size_t n) {
  std::vector<control::ToSupervisor> got;
  for (int i = 0; i < 200 && got.size() < n; ++i) {
    pollfd p{s.fd(), POLLIN, 0};
    poll(&p, 1, 100);
    for (auto& m : s.take()) got.push_back(std::move(m));
  }
  EXPECT_GE(got.size(), n) << "waited 20 s for " << n << " messages from the sampler";
  return got;
}

TEST(Monitor, JobGpusComeFromThePlanOfThisNode) {
  RankPlan plan;
  plan.ranks = {{0, 0, 0, 2, "a", {0}},
                {1, 0, 1, 2, "a", {1}},
                {2, 1, 0, 2, "b", {0}},
                {3, 1, 1, 2, "b", {1}}};
  JobGpus b = job_gpus(plan, 1, {"2", "3"});
  EXPECT_EQ(b.ids, (std::vector<std::string>{"2", "3"}));
  EXPECT_EQ(b.owner, (std::vector<int>{2, 3}));
  // Ranks without GPUs: the node's visible list is still the job's, owned by none.
  RankPlan cpu;
  cpu.ranks = {{0, 0, 0, 1, "a", {}}};
  JobGpus c = job_gpus(cpu, 0, {"GPU-x"});
  EXPECT_EQ(c.ids, (std::vector<std::string>{"GPU-x"}));
  EXPECT_EQ(c.owner, (std::vector<int>{-1}));
  EXPECT_TRUE(job_gpus(cpu, 0, {}).ids.empty());
}

TEST(Monitor, KeepsOnlyTheJobsGpusByIndexOrUuid) {
  gpuinfo::GpuSnapshot s;
  s.gpus = {gpu(0, -1, "GPU-a", 10), gpu(0, 0, "MIG-m0", std::nullopt), gpu(1, -1, "GPU-b", 20),
            gpu(2, -1, "GPU-c", 30)};
  gpuinfo::GpuSnapshot by_index = s;
  EXPECT_EQ(keep_job_gpus(by_index, {{"2", "0"}, {5, 4}, {"0", "2"}}), (std::vector<int>{4, 5}));
  ASSERT_EQ(by_index.gpus.size(), 2u);  // the MIG device under GPU 0 is not "0"
  EXPECT_EQ(by_index.gpus[0].uuid, "GPU-a");
  EXPECT_EQ(by_index.gpus[1].uuid, "GPU-c");
  gpuinfo::GpuSnapshot by_uuid = s;
  EXPECT_EQ(keep_job_gpus(by_uuid, {{"MIG-m0", "GPU-b"}, {7, -1}, {"MIG-m0", "GPU-b"}}),
            (std::vector<int>{7, -1}));
  EXPECT_EQ(by_uuid.gpus[0].uuid, "MIG-m0");
  gpuinfo::GpuSnapshot all = s;
  EXPECT_EQ(keep_job_gpus(all, {}), (std::vector<int>(4, -1)));
  EXPECT_EQ(all.gpus.size(), 4u);
}

TEST(Monitor, NamesTheJobsGpusTheListLacks) {
  gpuinfo::GpuSnapshot s;
  s.gpus = {gpu(0, -1, "GPU-a", 10), gpu(1, -1, "GPU-b", 20), gpu(2, -1, "GPU-c", 30)};
  EXPECT_EQ(keep_job_gpus(s, {{"1", "5"}, {0, 1}, {"1", "5"}}), (std::vector<int>{0}));
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0], "GPU 5 of the job is not among the GPUs listed here (0,1,2)");
}

// Inside the job's device cgroup the driver numbers the job's GPUs 2 and 3 as 0 and 1, while the
// node's list (SLURM_JOB_GPUS) holds the node's numbers: the k-th smallest is the listed GPU k.
TEST(Monitor, MatchesTheNodesNumbersToACgroupsRenumberedList) {
  gpuinfo::GpuSnapshot inside;
  inside.gpus = {gpu(0, -1, "GPU-c", 30), gpu(1, -1, "GPU-d", 40)};
  EXPECT_EQ(keep_job_gpus(inside, {{"3"}, {1}, {"3", "2"}}), (std::vector<int>{1}));
  ASSERT_EQ(inside.gpus.size(), 1u);
  EXPECT_EQ(inside.gpus[0].uuid, "GPU-d");
  EXPECT_EQ(inside.gpus[0].index, 3);  // the node's number, as the plan printed it
  EXPECT_TRUE(inside.problems.empty());
  // The whole node listed: numbers agree, nothing is renumbered.
  gpuinfo::GpuSnapshot node;
  node.gpus = {gpu(0, -1, "GPU-a", 10), gpu(1, -1, "GPU-b", 20), gpu(2, -1, "GPU-c", 30),
               gpu(3, -1, "GPU-d", 40)};
  EXPECT_EQ(keep_job_gpus(node, {{"2"}, {0}, {"2", "3"}}), (std::vector<int>{0}));
  EXPECT_EQ(node.gpus.at(0).uuid, "GPU-c");
  // The list is the cgroup's own numbering already: kept as it is.
  gpuinfo::GpuSnapshot same = inside;
  same.gpus = {gpu(0, -1, "GPU-c", 30), gpu(1, -1, "GPU-d", 40)};
  EXPECT_EQ(keep_job_gpus(same, {{"0"}, {4}, {"0", "1"}}), (std::vector<int>{4}));
  EXPECT_EQ(same.gpus.at(0).uuid, "GPU-c");
  // Counts that differ, or UUIDs in the list: no guess, and the missing GPU is said.
  gpuinfo::GpuSnapshot fewer;
  fewer.gpus = {gpu(0, -1, "GPU-c", 30)};
  EXPECT_TRUE(keep_job_gpus(fewer, {{"3"}, {1}, {"2", "3"}}).empty());
  EXPECT_EQ(fewer.problems.size(), 1u);
  // GPUs the driver lost: a short list is not a cgroup's, nothing is renumbered.
  gpuinfo::GpuSnapshot lost = inside;
  lost.gpus = {gpu(0, -1, "GPU-a", 10), gpu(1, -1, "GPU-b", 20)};
  lost.problems = {"Unable to determine the device handle for GPU2: 0000:34:00.0: Unknown Error"};
  EXPECT_TRUE(keep_job_gpus(lost, {{"2", "3"}, {0, 1}, {"2", "3"}}).empty());
  EXPECT_EQ(lost.problems.size(), 3u);
  gpuinfo::GpuSnapshot uuids;
  uuids.gpus = {gpu(0, -1, "GPU-c", 30), gpu(1, -1, "GPU-d", 40)};
  EXPECT_TRUE(keep_job_gpus(uuids, {{"3"}, {1}, {"GPU-x", "3"}}).empty());
}

TEST(Monitor, SummaryPerNodeAndStragglerUnderHalfTheMedian) {
  std::vector<GpuStats> g = {{"n1", 0, -1, 0, 2, 2, 2, 160, 90, 200},
                             {"n1", 1, -1, 1, 2, 2, 2, 170, 85, 300},
                             {"n2", 0, -1, 2, 2, 2, 2, 150, 75, 200},
                             {"n2", 1, -1, 3, 2, 2, 2, 60, 40, 100}};
  // Means 80, 85, 75, 30: median 77.5, half 38.75: only n2's GPU 1 is under it.
  auto lines = summarize(g);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "n1: GPU 0 (rank 0) util mean 80% max 90%, mem mean 100 MiB; GPU 1 (rank 1) util mean "
            "85% max 85%, mem mean 150 MiB");
  EXPECT_EQ(lines[1].substr(0, 4), "n2: ");
  // Nodes in the plan's order, whichever sent first.
  EXPECT_EQ(summarize(g, {"n2", "n1"})[0].substr(0, 4), "n2: ");
  EXPECT_EQ(lines[2],
            "likely straggler: n2 GPU 1 (rank 3): mean utilisation 30% is under half the job's "
            "median (78%)");
  // At 40% it is not under half of the median: nobody is named.
  g[3].util_sum = 80;
  EXPECT_EQ(summarize(g).size(), 2u);
  // One GPU has no peers; a GPU without utilisation (MIG mode) is never compared.
  EXPECT_EQ(summarize({{"n1", 0, -1, 0, 1, 1, 1, 1, 1, 1}}).size(), 1u);
  auto na = summarize({{"n1", 0, -1, -1, 3, 0, 0, 0, 0, 0},
                       {"n1", 1, -1, -1, 3, 3, 0, 240, 80, 0},
                       {"n1", 2, -1, -1, 3, 3, 0, 30, 10, 0}});
  EXPECT_EQ(na[0],
            "n1: GPU 0 util n/a, mem n/a; GPU 1 util mean 80% max 80%, mem n/a; GPU 2 util "
            "mean 10% max 10%, mem n/a");
  ASSERT_EQ(na.size(), 2u);
  EXPECT_NE(na[1].find("n1 GPU 2: mean utilisation 10%"), std::string::npos) << na[1];
}

TEST(Monitor, LogWritesHeaderAndWholeRows) {
  auto dir =
      std::filesystem::temp_directory_path() / ("gpurun-monitor-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "m.csv").string();
  {
    MonitorLog log(path);
    gpuinfo::GpuSnapshot s;
    s.time_ms = 1700000000123;
    s.gpus = {gpu(1, -1, "GPU-b", 55.5), gpu(3, 2, "MIG-x", std::nullopt)};
    s.gpus[0].power_w = 250;
    log.add("node2", control::GpuSamples{"3,-1", control::Text{gpuinfo::encode_snapshot(s)}});
    EXPECT_EQ(log.rows(), 2);
    EXPECT_THROW(log.add("node2", control::GpuSamples{"x", control::Text{gpuinfo::encode_snapshot(s)}}),
                 Error);
    EXPECT_THROW(log.add("node2", control::GpuSamples{"1", control::Text{"not a sample"}}), Error);
  }
  EXPECT_EQ(common::read_file(path).value_or(""),
            "time,node,rank,gpu,util,mem_used_mib,power_w,temp_c\n"
            "2023-11-14T22:13:20.123Z,node2,3,1,55.5,200,250,\n"
            "2023-11-14T22:13:20.123Z,node2,,3-mig2,,400,,\n");
  try {
    MonitorLog bad((dir / "no" / "m.csv").string());
    ADD_FAILURE() << "an unwritable path was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--monitor " + (dir / "no").string()), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Monitor, SamplerThreadSendsTheJobsGpusWithTheirRanks) {
  NodeSampler s(gpuinfo::SamplerConfig{fixture("nvidia-smi-4gpu")}, 100,
                JobGpus{{"3", "1"}, {9, 8}, {"1", "3"}});
  auto got = wait_for(s, 2);
  s.stop();
  for (const auto& m : got) {
    ASSERT_TRUE(std::holds_alternative<control::GpuSamples>(m));
    const auto& g = std::get<control::GpuSamples>(m);
    EXPECT_EQ(g.ranks, "8,9");  // the snapshot keeps nvidia-smi's order: GPU 1, then GPU 3
    gpuinfo::GpuSnapshot snap = gpuinfo::decode_snapshot(g.snapshot.value);
    ASSERT_EQ(snap.gpus.size(), 2u);
    EXPECT_EQ(snap.gpus[0].index, 1);
    EXPECT_EQ(snap.gpus[0].util_percent.value_or(-1), 45);
    EXPECT_EQ(snap.gpus[1].index, 3);
  }
}

TEST(Monitor, SamplerSaysOnceWhenThereIsNothingToSample) {
  NodeSampler missing(gpuinfo::SamplerConfig{"/nonexistent/nvidia-smi"}, 100, {});
  auto got = wait_for(missing, 1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<control::GpuSamplesFailed>(got[0]));
  EXPECT_NE(std::get<control::GpuSamplesFailed>(got[0]).what.value.find("/nonexistent/nvidia-smi"),
            std::string::npos);
  // It stopped: nothing more comes.
  pollfd p{missing.fd(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 500), 0);
  // GPUs the driver lists but none of them the job's: said, not silently empty.
  NodeSampler other(gpuinfo::SamplerConfig{fixture("nvidia-smi-4gpu")}, 100, JobGpus{{"7"}, {0}, {"7"}});
  auto o = wait_for(other, 1);
  ASSERT_TRUE(std::holds_alternative<control::GpuSamplesFailed>(o.at(0)));
  EXPECT_NE(std::get<control::GpuSamplesFailed>(o[0]).what.value.find("(0,1,2,3)"),
            std::string::npos);
}

// A wrapper's EXIT waits for the sampler to stop: an nvidia-smi that hangs is killed then, not
// waited for until its timeout (10 s), and its end is not reported as a failure.
TEST(Monitor, StopCutsAHungNvidiaSmiShort) {
  auto dir = std::filesystem::temp_directory_path() / ("gpurun-hung-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string hung = (dir / "nvidia-smi").string();
  std::ofstream(hung) << "#!/bin/sh\nexec sleep 30\n";
  std::filesystem::permissions(hung, std::filesystem::perms::owner_all);
  NodeSampler s(gpuinfo::SamplerConfig{hung, 10000}, 100, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the first call is under way
  auto t0 = std::chrono::steady_clock::now();
  s.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_TRUE(s.take().empty());
  std::filesystem::remove_all(dir);
}

TEST(Monitor, ControlMessagesRoundTrip) {
  std::string snap = "gpus/1 t=5 host=n%201 src=nvidia-smi g=0,-1,17,1024,-,-,-,GPU-a,A100";
  std::string line = control::encode(control::GpuSamples{"0,-1", control::Text{snap}});
  ASSERT_EQ(line.find('\n'), line.size() - 1);
  line.pop_back();
  auto m = control::parse_to_supervisor(line);
  ASSERT_TRUE(m && std::holds_alternative<control::GpuSamples>(*m));
  EXPECT_EQ(std::get<control::GpuSamples>(*m).ranks, "0,-1");
  EXPECT_EQ(std::get<control::GpuSamples>(*m).snapshot.value, snap);
  auto go = control::parse_to_wrapper("GO 0 0 none 200");
  ASSERT_TRUE(go && std::holds_alternative<control::Go>(*go));
  EXPECT_EQ(std::get<control::Go>(*go).monitor_ms, 200);
}

}  // namespace
}  // namespace gpurun::launcher::monitor

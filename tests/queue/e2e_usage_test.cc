// End-to-end: usage accounting with a real daemon sampling fake GPUs (GPURUN_NVIDIA_SMI pointing at
// the fixture scripts in tests/launcher/fixtures/nvidia-smi; no GPU here). `gpuq stats`, `--csv`,
// `--plot`, `gpuq history` and `gpuq report` show the fixture's figures; a GPU that vanishes
// mid-job stops being sampled without stopping the job; sampling can be turned off; a store
// written by main before usage existed opens, upgrades and keeps its jobs.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "harness.h"

using namespace gpuq_test;

namespace {

std::string fixture(const std::string& name) {
  return std::string(GPURUN_FIXTURES) + "/nvidia-smi/" + name;
}

// The daemon inherits this process's environment: point its sampler at a fixture.
struct FakeGpus {
  explicit FakeGpus(const std::string& script) {
    setenv("GPURUN_NVIDIA_SMI", fixture(script).c_str(), 1);
  }
  ~FakeGpus() { unsetenv("GPURUN_NVIDIA_SMI"); }
};

// What nvidia-smi-4gpu prints for each GPU: utilisation and memory used (MiB).
const std::map<int, std::pair<double, double>> kFixture = {
    {0, {17, 1024}}, {1, {45, 20480}}, {2, {90, 38000}}, {3, {0, 4}}};

// A job that stays on its GPUs for about `seconds` and burns CPU first: 400,000 shell steps,
// about 0.25 s, well above the 0.1 s the tests ask to see counted (150,000 took 0.097 s on a
// fast VM, and the check failed).
const char* kBurn =
    "#!/bin/sh\ni=0; while [ $i -lt 400000 ]; do i=$((i+1)); done\nsleep \"${1:-3}\"\n";

nlohmann::json stats_json(const Daemon& d, int64_t id) {
  Result r = d.gpuq(fmt::format("stats --json {}", id));
  if (r.rc != 0) throw std::runtime_error("gpuq stats failed: " + r.err);
  return nlohmann::json::parse(r.out);
}

// Waits until the job has `n` samples per GPU recorded (bounded; names what it waited for).
void wait_samples(const Daemon& d, int64_t id, size_t per_gpu, double timeout_s = 30) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int(timeout_s * 1000));
  size_t have = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto s = stats_json(d, id);
    have = s["samples"].size() / std::max<size_t>(1, s["job"]["gpus"].size());
    if (have >= per_gpu) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error(fmt::format("job {} had {} samples per GPU after {} s, waited for {}",
                                       id, have, timeout_s, per_gpu));
}

// What `gpuq stats ID` and `gpuq stats --csv ID` print for a finished job that held `held`.
void expect_stats_text(const Daemon& d, int64_t id, const std::set<int>& held, int cores) {
  double expect_sum = 0, expect_max = 0;
  for (int g : held) {
    expect_sum += kFixture.at(g).first;
    expect_max = std::max(expect_max, kFixture.at(g).first);
  }
  Result t = d.gpuq(fmt::format("stats {}", id));
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find(fmt::format("GPU Utilization: mean {:.1f}%, max {:.1f}%",
                                   expect_sum / held.size(), expect_max)),
            std::string::npos)
      << t.out;
  for (int g : held)
    EXPECT_NE(t.out.find(fmt::format("  GPU {}: mean {:.1f}%, max {:.1f}%, memory max {:.0f} of "
                                     "40960 MiB",
                                     g, kFixture.at(g).first, kFixture.at(g).first,
                                     kFixture.at(g).second)),
              std::string::npos)
        << t.out;
  EXPECT_NE(t.out.find("CPU Efficiency: "), std::string::npos);
  EXPECT_NE(t.out.find(cores == 1 ? "core-walltime (1 core)"
                                  : fmt::format("core-walltime ({} cores)", cores)),
            std::string::npos)
      << t.out;
  Result csv = d.gpuq(fmt::format("stats --csv {}", id));
  auto rows = lines(csv.out);
  ASSERT_GE(rows.size(), 3u);
  EXPECT_EQ(rows[0], "time,gpu,util,mem_used_mib,power_w,temp_c");
}

}  // namespace

TEST(GpuqUsage, StatsAndReportShowTheFixturesFigures) {
  FakeGpus gpus("nvidia-smi-4gpu");
  Daemon d({"--sample-interval", "1"});
  d.script("burn.sh", kBurn);
  int64_t a = d.submit("--gres=gpu:2 -J pair -A physics burn.sh 4");
  int64_t b = d.submit("--gres=gpu:1 -J single -A chemistry burn.sh 4");
  int64_t c = d.submit("--gres=gpu:1 -J third -c 2 burn.sh 4");
  for (int64_t id : {a, b, c}) wait_samples(d, id, 2);
  for (int64_t id : {a, b, c}) ASSERT_EQ(d.wait_final(id)["state"], "COMPLETED");

  double report_sum = 0, jobs_gpu_s = 0;
  int64_t report_n = 0;
  for (int64_t id : {a, b, c}) {
    auto s = stats_json(d, id);
    // Each job held its GPUs for its 4 s of sleep and its CPU burn (about a second, by the
    // CPU), no longer than it ran (from its start and end, in ms).
    const double gpu_s = s["job"]["gpu_hours"].get<double>() * 3600;
    const double ran_s =
        (s["job"]["end_ms"].get<int64_t>() - s["job"]["start_ms"].get<int64_t>()) / 1000.0;
    EXPECT_GE(gpu_s, 4.0 * double(s["job"]["gpus"].size())) << s.dump();
    EXPECT_LE(gpu_s, (ran_s + 0.01) * double(s["job"]["gpus"].size())) << s.dump();
    jobs_gpu_s += gpu_s;
    std::set<int> held;
    double expect_sum = 0, expect_mem = 0, expect_max = 0;
    for (const auto& g : s["job"]["gpus"]) {
      held.insert(g.get<int>());
      expect_sum += kFixture.at(g.get<int>()).first;
      expect_max = std::max(expect_max, kFixture.at(g.get<int>()).first);
      expect_mem = std::max(expect_mem, kFixture.at(g.get<int>()).second);
    }
    const auto& u = s["job"]["usage"];
    ASSERT_GE(u["util_samples"].get<int64_t>(), 2 * int64_t(held.size())) << s.dump();
    // Every GPU is sampled at every tick, so the mean is the mean of the fixture's figures.
    EXPECT_NEAR(s["job"]["util_mean"].get<double>(), expect_sum / held.size(), 1e-9);
    EXPECT_EQ(u["util_max"].get<double>(), expect_max);
    EXPECT_EQ(u["mem_max_mib"].get<double>(), expect_mem);
    EXPECT_GE(u["cpu_seconds"].get<double>(), 0.1) << "the CPU burn is not counted";
    EXPECT_GT(u["peak_rss_bytes"].get<int64_t>(), 0);
    report_sum += u["util_sum"].get<double>();
    report_n += u["util_samples"].get<int64_t>();
    for (const auto& row : s["samples"]) {
      int g = row[1].get<int>();
      EXPECT_TRUE(held.count(g)) << "a sample of GPU " << g << " the job did not hold";
      EXPECT_EQ(row[2].get<double>(), kFixture.at(g).first);
    }
    expect_stats_text(d, id, held, id == c ? 2 : 1);
  }

  Result h = d.gpuq("history");
  EXPECT_NE(h.out.find("GPUs GPUHours MeanUtil"), std::string::npos) << h.out;
  auto hist = lines(h.out);
  ASSERT_EQ(hist.size(), 5u) << h.out;
  EXPECT_NE(
      hist[2].find(fmt::format("{:.1f}%", stats_json(d, a)["job"]["util_mean"].get<double>())),
      std::string::npos)
      << hist[2];

  auto rep = nlohmann::json::parse(d.gpuq("report --json").out);
  ASSERT_EQ(rep["rows"].size(), 1u) << rep.dump();
  EXPECT_EQ(rep["rows"][0]["jobs"], 3);
  EXPECT_NEAR(rep["rows"][0]["util_mean"].get<double>(), report_sum / report_n, 1e-9);
  // The jobs' GPU-hours added (4 GPUs for at least 4 s each, checked above); before, near 16
  // GPU-seconds within 4, which a slower CPU's burn loop (a second a job) overran.
  EXPECT_NEAR(rep["rows"][0]["gpu_hours"].get<double>() * 3600, jobs_gpu_s, 0.01);
  Result text = d.gpuq("report --since 1h");
  EXPECT_NE(text.out.find(fmt::format("root                  3 ")), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(fmt::format("{:.1f}%", report_sum / report_n)), std::string::npos);
  Result acc = d.gpuq("report --by account");
  for (const char* key : {"physics", "chemistry", "(none)"})
    EXPECT_NE(acc.out.find(key), std::string::npos) << acc.out;
}

TEST(GpuqUsage, PlotWritesAPngOrNothing) {
  FakeGpus gpus("nvidia-smi-4gpu");
  Daemon d({"--sample-interval", "1"});
  d.script("burn.sh", kBurn);
  int64_t id = d.submit("--gres=gpu:2 burn.sh 3");
  wait_samples(d, id, 2);
  d.wait_final(id);
  std::string png = d.dir() + "/plot.png";
  Result r = d.gpuq(fmt::format("stats --plot {} {}", png, id));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string bytes = read_text(png);
  ASSERT_GT(bytes.size(), 2000u);
  EXPECT_EQ(bytes.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_FALSE(std::filesystem::exists(png + ".tmp"));
  Result bad = d.gpuq(fmt::format("stats --plot {}/no/such/dir/p.png {}", d.dir(), id));
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("gpuq: error:"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(d.dir() + "/no"));
}

TEST(GpuqUsage, AVanishedGpuStopsBeingSampledAndTheJobGoesOn) {
  std::string state = "/tmp/gpuq-vanish-" + std::to_string(getpid());
  setenv("FAKE_NVIDIA_SMI_STATE", state.c_str(), 1);
  FakeGpus gpus("nvidia-smi-vanish");
  Daemon d({"--sample-interval", "1"});
  d.script("burn.sh", kBurn);
  int64_t id = d.submit("--gres=gpu:4 burn.sh 6");
  auto j = d.wait_final(id, 60);
  unsetenv("FAKE_NVIDIA_SMI_STATE");
  ::unlink(state.c_str());
  EXPECT_EQ(j["state"], "COMPLETED");
  std::map<int, int> per_gpu;
  const auto stats = stats_json(d, id);
  for (const auto& row : stats["samples"]) per_gpu[row[1].get<int>()] += 1;
  std::string log = read_text(d.dir() + "/daemon.log");
  ASSERT_EQ(per_gpu.size(), 4u) << log << stats.dump();
  EXPECT_LE(per_gpu[2], 3) << "GPU 2 is gone from the 4th call of nvidia-smi on";
  EXPECT_GT(per_gpu[0], per_gpu[2]);
  EXPECT_EQ(per_gpu[0], per_gpu[3]);
  EXPECT_NE(log.find("Unable to determine the device handle for GPU2"), std::string::npos) << log;
}

TEST(GpuqUsage, SamplingOffRecordsNothingAndSaysSo) {
  FakeGpus gpus("nvidia-smi-4gpu");
  Daemon d({"--sample-interval", "0"});
  d.script("burn.sh", kBurn);
  int64_t id = d.submit("--gres=gpu:1 burn.sh 1");
  d.wait_final(id);
  auto s = stats_json(d, id);
  EXPECT_TRUE(s["samples"].empty());
  EXPECT_GT(s["job"]["usage"]["cpu_seconds"].get<double>(), 0.05)  // the supervisor's rusage
      << s.dump();
  EXPECT_NE(d.gpuq(fmt::format("stats {}", id)).out.find("no samples (sampling off"),
            std::string::npos);
  Result plot = d.gpuq(fmt::format("stats --plot {}/p.png {}", d.dir(), id));
  EXPECT_NE(plot.rc, 0);
  EXPECT_NE(plot.err.find("has no samples to plot"), std::string::npos) << plot.err;
}

TEST(GpuqUsage, BadInputIsRefusedNamingIt) {
  Daemon d;
  auto err = [&](const std::string& args) {
    Result r = d.gpuq(args);
    EXPECT_NE(r.rc, 0) << args;
    return r.err;
  };
  EXPECT_NE(err("stats 999").find("invalid job id '999'"), std::string::npos);
  EXPECT_NE(err("stats").find("no job id given"), std::string::npos);
  EXPECT_NE(err("stats --csv --json 1").find("at most one of"), std::string::npos);
  EXPECT_NE(err("report --since yesterday").find("--since 'yesterday'"), std::string::npos);
  EXPECT_NE(err("report --by group").find("expected user or account"), std::string::npos);
  Result daemon = sh(
      fmt::format("{} daemon --gpus 0 --state-dir {}/x --sample-interval -1", gpuq_bin(), d.dir()));
  EXPECT_NE(daemon.rc, 0);
  EXPECT_NE(daemon.err.find("--sample-interval -1"), std::string::npos) << daemon.err;
}

TEST(GpuqUsage, AStoreWrittenByMainOpensAndUpgrades) {
  Daemon d;
  d.stop();  // then the same state dir with main's store in it
  for (const char* f : {"jobs.db", "jobs.db-wal", "jobs.db-shm"})
    std::filesystem::remove(d.dir() + "/state/" + f);
  std::filesystem::copy_file(std::string(GPUQ_TEST_DATA) + "/store-main-b4b2b7a.db",
                             d.dir() + "/state/jobs.db");
  d.start();
  Result h = d.gpuq("history");
  ASSERT_EQ(h.rc, 0) << h.err;
  for (const char* name : {"old-train", "old-fail", "old-array"})
    EXPECT_NE(h.out.find(name), std::string::npos) << h.out;
  for (const auto& l : lines(h.out))  // old jobs: GPU-hours from their times, no utilisation
    if (l.find("old-train") != std::string::npos) {
      EXPECT_EQ(l.substr(l.size() - 26), "       2     0.00        -") << l;  // 2 GPUs
    }
  EXPECT_NE(d.gpuq("queue").out.find("(JobHeldUser)"), std::string::npos);
  auto rep = nlohmann::json::parse(d.gpuq("report --since all --json").out);
  ASSERT_EQ(rep["rows"].size(), 1u);
  EXPECT_EQ(rep["rows"][0]["jobs"], 4);  // the four that ran
  EXPECT_GT(rep["rows"][0]["gpu_hours"].get<double>(), 0);
  d.script("ok.sh", "#!/bin/sh\ntrue\n");
  EXPECT_EQ(d.submit("ok.sh"), 6) << "ids go on after the old store's";
}

// Bad stats requests get an error reply; the daemon (root's, on a socket every user may open)
// must not crash on them. max_points 2^64-1 or -1 made the bucket size wrap to 0, and an empty id
// list was read past its end: both ended the daemon with SIGSEGV.
TEST(GpuqUsage, BadStatsRequestsAreRefusedNotFatal) {
  FakeGpus gpus("nvidia-smi-4gpu");
  Daemon d({"--sample-interval", "1"});
  d.script("burn.sh", kBurn);
  int64_t id = d.submit("--gres=gpu:1 burn.sh 3");
  wait_samples(d, id, 2);
  const std::string ids = fmt::format("[\"{}\"]", id);
  for (const char* bad : {"18446744073709551615", "-1", "1000001", "\"5\"", "2.5"}) {
    auto r = d.request(fmt::format(R"({{"op":"stats","ids":{},"max_points":{}}})", ids, bad));
    EXPECT_FALSE(r.value("ok", true)) << bad << ": " << r.dump();
    EXPECT_NE(r.value("error", "").find("'max_points': expected an integer from 0 to 1000000"),
              std::string::npos)
        << r.dump();
  }
  auto empty = d.request(R"({"op":"stats","ids":[]})");
  EXPECT_FALSE(empty.value("ok", true)) << empty.dump();
  EXPECT_NE(empty.value("error", "").find("no job id given"), std::string::npos) << empty.dump();
  auto two = d.request(fmt::format(R"({{"op":"stats","ids":["{}","{}"]}})", id, id));
  EXPECT_FALSE(two.value("ok", true)) << "two ids are not an array's: " << two.dump();
  EXPECT_NE(two.value("error", "").find("one job id at a time"), std::string::npos) << two.dump();
  auto one = d.request(fmt::format(R"({{"op":"stats","ids":{},"max_points":1}})", ids));
  ASSERT_TRUE(one.value("ok", false)) << one.dump();
  EXPECT_EQ(one["samples"].size(), 1u) << "one GPU, one point";
  EXPECT_EQ(d.gpuq("queue").rc, 0) << "the daemon did not survive the bad requests";
}

// The GPU pool comes from the sampler that samples it (issue 25): with GPURUN_NVIDIA_SMI naming a
// 4-GPU nvidia-smi, `gpuq daemon` without --gpus schedules GPUs 0-3. It ran `nvidia-smi` from
// PATH on its own and said "no GPUs found" where sampling worked.
TEST(GpuqUsage, DaemonFindsItsGpusThroughTheSampler) {
  FakeGpus gpus("nvidia-smi-4gpu");
  Daemon d({}, "auto");
  auto ping = d.request(R"({"op":"ping"})");
  EXPECT_EQ(ping["gpus"], nlohmann::json({0, 1, 2, 3})) << ping.dump();
}

// Without any GPU reader the daemon says why and what to do, instead of starting a queue of none.
TEST(GpuqUsage, DaemonWithoutGpusSaysWhy) {
  FakeGpus gpus("nvidia-smi-broken");
  TempDir dir;
  Result r = sh(fmt::format("{} daemon --state-dir {}/s --socket {}/s.sock", gpuq_bin(), dir.path(),
                            dir.path()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("no GPUs found"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--gpus 0,1,... or --gpus none"), std::string::npos) << r.err;
}

// --gpus naming a GPU the machine lacks gets a warning (a user's review: --gpus 9 on a machine of
// GPUs 0-7 started without a word, and jobs would have got CUDA_VISIBLE_DEVICES=9; a warning, not
// an error, so that a pool of ids on purpose still starts); ranges are taken (0-2 was "bad id");
// a negative --max-gpus-per-user is refused, not taken as no limit; a shared --state-dir gets
// advice that fits it.
TEST(GpuqUsage, DaemonGpuListIsCheckedAgainstTheMachine) {
  FakeGpus gpus("nvidia-smi-4gpu");
  TempDir dir;
  auto daemon = [&](const std::string& args) {
    return sh(fmt::format("timeout 20 {} daemon {} --state-dir {}/s --socket {}/s.sock",
                          gpuq_bin(), args, dir.path(), dir.path()));
  };
  {
    Daemon nine({}, "0,9");
    EXPECT_NE(nine.log().find("warning: --gpus names GPU(s) 9 that this machine does not show "
                              "(nvidia-smi lists 0,1,2,3)"),
              std::string::npos)
        << nine.log();
  }
  Result shared = sh(fmt::format("timeout 20 {} daemon --gpus 0 --state-dir /tmp --socket {}/s.sock",
                                 gpuq_bin(), dir.path()));
  EXPECT_NE(shared.err.find("it is a shared folder: give --state-dir a folder of the daemon's own"),
            std::string::npos)
      << shared.err;
  Result backwards = daemon("--gpus 3-1");
  EXPECT_NE(backwards.err.find("bad id '3-1' in list '3-1': expected ids and ranges"),
            std::string::npos)
      << backwards.err;
  Result negative = daemon("--gpus 0 --max-gpus-per-user -1");
  EXPECT_NE(negative.err.find("--max-gpus-per-user -1: expected 0 (no limit) or more"),
            std::string::npos)
      << negative.err;
  Daemon d({}, "1-3");
  EXPECT_EQ(d.request(R"({"op":"ping"})")["gpus"], nlohmann::json({1, 2, 3}));
}

// `gpuq stats` of an array's id lists its tasks, one line each as sacct does, with each task's
// state, exit code, elapsed and GPUs, a running one's elapsed counted to now; --csv and --plot,
// which draw one job's samples, ask for one task. Before, the array's id was an error.
TEST(GpuqUsage, StatsOfAnArrayListsItsTasks) {
  Daemon d;
  d.script("task.sh",
           "#!/bin/sh\n[ \"$SLURM_ARRAY_TASK_ID\" = 2 ] && exit 3\n"
           "[ \"$SLURM_ARRAY_TASK_ID\" = 1 ] && exec sleep 60\ntrue\n");
  const int64_t arr = d.submit("--array=0-2 -J tasks task.sh");
  d.wait_final(arr);
  d.wait_final(arr + 2);
  d.wait_state(arr + 1, "RUNNING");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the running task's elapsed
  Result r = d.gpuq(fmt::format("stats {}", arr));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find(fmt::format("Job {} is an array of 3 tasks", arr)), std::string::npos)
      << r.out;
  auto line = [&](int task) {
    const std::string id = fmt::format("{}_{}", arr, task);
    const size_t at = r.out.find("\n" + id + " ");
    return at == std::string::npos ? std::string()
                                   : r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(line(0).find("COMPLETED"), std::string::npos) << r.out;
  EXPECT_NE(line(0).find(" 0:0 "), std::string::npos) << r.out;
  EXPECT_NE(line(1).find("RUNNING"), std::string::npos) << r.out;
  EXPECT_EQ(line(1).find("00:00:00"), std::string::npos) << "a running task's elapsed: " << r.out;
  EXPECT_NE(line(2).find("FAILED"), std::string::npos) << r.out;
  EXPECT_NE(line(2).find(" 3:0 "), std::string::npos) << r.out;
  const nlohmann::json j = stats_json(d, arr);
  EXPECT_EQ(j["tasks"].size(), 3u);
  EXPECT_EQ(j["tasks_total"], 3);
  for (const char* one : {"--csv", "--plot x.png"}) {
    Result refused = d.gpuq(fmt::format("stats {} {}", one, arr));
    EXPECT_NE(refused.rc, 0) << one;
    EXPECT_NE(refused.err.find(fmt::format("job {} is an array of 3 tasks: --csv and --plot take "
                                           "one task (ID_TASK)",
                                           arr)),
              std::string::npos)
        << refused.err;
  }
  EXPECT_EQ(d.gpuq(fmt::format("stats {}_1", arr)).rc, 0);
  d.gpuq(fmt::format("cancel {}", arr));
}

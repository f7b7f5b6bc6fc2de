// End-to-end scheduling: GPUs are exclusive (checked from timestamps the jobs log themselves),
// time limits end in TIMEOUT with the --signal seen by the job, the whole process group is
// signalled, dependencies and arrays (with their %N cap) hold, and the per-user GPU limit holds.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "gpurun/queue/format.h"
#include "harness.h"

using namespace gpuq_test;

namespace {
struct Interval {
  int64_t id;
  std::string gpus;
  int64_t start, end;
};

// Lines "ID GPUS START_NS END_NS" written by the jobs.
std::vector<Interval> read_intervals(const std::string& path) {
  std::vector<Interval> out;
  for (const auto& l : lines(read_text(path))) {
    std::istringstream in(l);
    Interval iv;
    in >> iv.id >> iv.gpus >> iv.start >> iv.end;
    out.push_back(iv);
  }
  return out;
}

// No GPU id is held by two intervals at once; returns the peak number of concurrent intervals.
int check_exclusive(const std::vector<Interval>& ivs) {
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> by_gpu;
  std::vector<std::pair<int64_t, int>> events;
  for (const auto& iv : ivs) {
    std::stringstream ss(iv.gpus);
    std::string g;
    while (std::getline(ss, g, ',')) by_gpu[g].push_back({iv.start, iv.end});
    events.push_back({iv.start, 1});
    events.push_back({iv.end, -1});
  }
  for (auto& [g, v] : by_gpu) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i)
      EXPECT_LE(v[i - 1].second, v[i].first) << "GPU " << g << " held twice at once";
  }
  std::sort(events.begin(), events.end());
  int cur = 0, peak = 0;
  for (auto& e : events) peak = std::max(peak, cur += e.second);
  return peak;
}

const char* kIntervalJob =
    "#!/bin/bash\n"
    "s=$(date +%s%N)\n"
    "sleep 0.$((RANDOM % 3 + 1))\n"
    "e=$(date +%s%N)\n"
    "echo \"$GPUQ_JOB_ID $CUDA_VISIBLE_DEVICES $s $e\" >> $LOG\n";
}  // namespace

TEST(GpuqE2E, FiftyOneGpuJobsOnFourIdsNeverShareAGpu) {
  Daemon d;
  d.script("iv.sh", kIntervalJob);
  std::string log = d.dir() + "/intervals.log";
  // Queue them all first (drained), so all four GPUs are contended however slow submission is.
  ASSERT_EQ(d.gpuq("drain").rc, 0);
  std::vector<int64_t> ids;
  for (int i = 0; i < 50; ++i) ids.push_back(d.submit("--gpus=1 --export=LOG iv.sh"));
  ASSERT_EQ(d.gpuq("resume").rc, 0);
  for (auto id : ids) EXPECT_EQ(d.wait_final(id, 120)["state"], "COMPLETED");
  auto ivs = read_intervals(log);
  ASSERT_EQ(ivs.size(), 50u);
  int peak = check_exclusive(ivs);
  EXPECT_EQ(peak, 4) << "all four GPUs should have been used at once";
  std::set<std::string> used;
  for (const auto& iv : ivs) used.insert(iv.gpus);
  EXPECT_EQ(used, (std::set<std::string>{"0", "1", "2", "3"}));
}

TEST(GpuqE2E, TimeLimitSignalsThenTimeout) {
  Daemon d({"--kill-wait", "1"});
  d.script("trap.sh",
           "#!/bin/bash\n#SBATCH --time=0:03 --signal=B:USR1@2\n"
           "trap 'echo got USR1' USR1\n"
           "trap 'echo got TERM; kill $child; exit 143' TERM\n"
           "sleep 1000 & child=$!\n"
           "echo child $child\n"
           "while true; do sleep 0.1; done\n");
  int64_t a = d.submit("trap.sh");
  // A job that ignores SIGTERM is killed KillWait (1 s) later; its background child too.
  d.script("stubborn.sh",
           "#!/bin/bash\n#SBATCH -t 0:02\ntrap '' TERM\n"
           "(trap '' TERM; sleep 1000) & echo bg $!\n"
           "while true; do sleep 0.1; done\n");
  int64_t b = d.submit("stubborn.sh");
  auto ja = d.wait_final(a, 30);
  EXPECT_EQ(ja["state"], "TIMEOUT");
  std::string out = read_text(fmt::format("{}/slurm-{}.out", d.dir(), a));
  auto pos1 = out.find("got USR1"), pos2 = out.find("got TERM");
  EXPECT_NE(pos1, std::string::npos) << out;
  EXPECT_NE(pos2, std::string::npos) << out;
  EXPECT_LT(pos1, pos2);
  int64_t ms = ja["end_ms"].get<int64_t>() - ja["start_ms"].get<int64_t>();
  EXPECT_GE(ms, 3000);
  EXPECT_LT(ms, 6000);
  auto jb = d.wait_final(b, 30);
  EXPECT_EQ(jb["state"], "TIMEOUT");
  EXPECT_EQ(jb["exit_signal"], 9);
  std::string outb = read_text(fmt::format("{}/slurm-{}.out", d.dir(), b));
  int bg = std::atoi(outb.substr(outb.find("bg ") + 3).c_str());
  ASSERT_GT(bg, 0);
  EXPECT_NE(::kill(bg, 0), 0) << "the job's background process survived it";
  EXPECT_NE(d.gpuq("history").out.find("TIMEOUT      0:9"), std::string::npos);
}

// cancel --signal, as scancel --signal without --batch: the job's programs get it, the batch shell
// does not (an untrapped USR2 would end it: the job would be FAILED, not COMPLETED).
TEST(GpuqE2E, CancelWithSignalOnlySignals) {
  Daemon d;
  d.script("usr2.sh",
           "#!/bin/bash\n"
           "bash -c \"trap 'echo got USR2; exit 0' USR2; while true; do sleep 0.1; done\"\n"
           "echo shell still here\n");
  int64_t a = d.submit("usr2.sh");
  d.wait_state(a, "RUNNING");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(d.gpuq(fmt::format("cancel --signal USR2 {}", a)).rc, 0);
  d.wait_final(a);
  const std::string out = d.output(a);
  EXPECT_EQ(d.show(a)["state"], "COMPLETED") << out;
  EXPECT_NE(out.find("got USR2\nshell still here\n"), std::string::npos) << out;
}

// --signal=USR1@N without B:, as Slurm's: the steps get it (srun's tasks, once each), the batch
// shell does not. It went to the job's process group, and the untrapped batch shell died of it:
// the job ended FAILED (0:10) before its tasks could checkpoint.
TEST(GpuqE2E, SignalWithoutBReachesTheStepsNotTheShell) {
  Daemon d;
  d.script("steps.sh",
           "#!/bin/bash\n#SBATCH -n 2 --time=0:06 --signal=USR1@4\n"
           "srun bash -c 'trap \"echo task $SLURM_PROCID USR1 >> sig.txt; exit 0\" USR1; "
           "for i in $(seq 100); do sleep 0.1; done'\n"
           "echo shell rc=$?\n");
  const int64_t a = d.submit("steps.sh");
  auto j = d.wait_final(a, 30);
  const std::string out = d.output(a);
  EXPECT_EQ(j["state"], "COMPLETED") << out;
  EXPECT_EQ(out, "shell rc=0\n");
  auto got = lines(read_text(d.dir() + "/sig.txt"));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"task 0 USR1", "task 1 USR1"}));
}

TEST(GpuqE2E, DependenciesReleaseInOrderAndNeverWhenUnsatisfiable) {
  Daemon d;
  d.script("fail.sh", "#!/bin/sh\nsleep 1.5\nexit 1\n");
  d.script("ok.sh", "#!/bin/sh\necho ok\n");
  int64_t a = d.submit("fail.sh");
  int64_t b = d.submit(fmt::format("--dependency=afterok:{} ok.sh", a));
  int64_t c = d.submit(fmt::format("-d afternotok:{} ok.sh", a));
  int64_t e = d.submit(fmt::format("-d afterany:{} ok.sh", a));
  int64_t f = d.submit(fmt::format("-d afterok:{}:{} ok.sh", c, e));
  EXPECT_EQ(d.show(b)["reason"], "Dependency");
  auto ja = d.wait_final(a);
  auto jc = d.wait_final(c), je = d.wait_final(e), jf = d.wait_final(f);
  EXPECT_EQ(ja["state"], "FAILED");
  EXPECT_EQ(jc["state"], "COMPLETED");
  EXPECT_EQ(je["state"], "COMPLETED");
  EXPECT_EQ(jf["state"], "COMPLETED");
  EXPECT_GE(jc["start_ms"].get<int64_t>(), ja["end_ms"].get<int64_t>());
  EXPECT_GE(je["start_ms"].get<int64_t>(), ja["end_ms"].get<int64_t>());
  EXPECT_GE(jf["start_ms"].get<int64_t>(),
            std::max(jc["end_ms"].get<int64_t>(), je["end_ms"].get<int64_t>()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto jb = d.show(b);
  EXPECT_EQ(jb["state"], "PENDING");  // afterok on a failed job: never released (Slurm)
  EXPECT_EQ(jb["reason"], "DependencyNeverSatisfied");
}

TEST(GpuqE2E, ArrayTasksHonourTheCapAndPatterns) {
  Daemon d;
  d.script("arr.sh",
           "#!/bin/bash\n#SBATCH --array=0-5%2 --gres=gpu:1\n"
           "s=$(date +%s%N); sleep 0.3; e=$(date +%s%N)\n"
           "echo \"$GPUQ_JOB_ID $GPUQ_ARRAY_TASK_ID $s $e\" >> $LOG\n"
           "echo task $GPUQ_ARRAY_TASK_ID of $GPUQ_ARRAY_JOB_ID\n");
  int64_t a = d.submit("--export=LOG arr.sh");
  auto q = d.gpuq("queue").out;
  EXPECT_NE(q.find(fmt::format("{}_5", a)), std::string::npos) << q;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d.wait_final(a + i, 60)["state"], "COMPLETED");
  auto ivs = read_intervals(d.dir() + "/intervals.log");
  ASSERT_EQ(ivs.size(), 6u);
  EXPECT_LE(check_exclusive(ivs), 2);  // %2: never more than two tasks at once (gpus col = task)
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(read_text(fmt::format("{}/slurm-{}_{}.out", d.dir(), a, i)),
              fmt::format("task {} of {}\n", i, a));
  // Dependencies on an array wait for every task.
  d.script("ok.sh", "#!/bin/sh\necho ok\n");
  int64_t b = d.submit("--array=1-3 -t 1 ok.sh");
  int64_t c = d.submit(fmt::format("-d afterok:{} ok.sh", b));
  auto jc = d.wait_final(c);
  EXPECT_EQ(jc["state"], "COMPLETED");
  for (int i = 0; i < 3; ++i)
    EXPECT_GE(jc["start_ms"].get<int64_t>(), d.show(b + i)["end_ms"].get<int64_t>());
}

// afterok:ID_T (Slurm's): one task of an array, not the whole array; shown as it was asked for.
TEST(GpuqE2E, DependencyOnOneArrayTask) {
  Daemon d;
  d.script("task.sh", "#!/bin/sh\nsleep $((1 + 4 * SLURM_ARRAY_TASK_ID))\n");
  const std::string ok = d.script("ok.sh", "#!/bin/sh\necho ok\n");
  const int64_t arr = d.submit("--array=0-1 task.sh");
  const int64_t after0 = d.submit(fmt::format("-d afterok:{}_0 ok.sh", arr));
  const int64_t after1 = d.submit(fmt::format("-d afterany:{}_1 ok.sh", arr));
  const int64_t whole = d.submit(fmt::format("-d afterok:{} ok.sh", arr));
  for (const auto& [id, want] :
       {std::pair{after0, fmt::format("Dependency=afterok:{}_0\n", arr)},
        std::pair{after1, fmt::format("Dependency=afterany:{}_1\n", arr)},
        std::pair{whole, fmt::format("Dependency=afterok:{}\n", arr)}}) {
    Result shown = d.gpuq(fmt::format("show {}", id));
    EXPECT_NE(shown.out.find(want), std::string::npos) << shown.out;
  }
  const auto done = d.wait_final(after0, 30);
  EXPECT_EQ(done["state"], "COMPLETED");
  const auto task1 = d.show(arr + 1);
  EXPECT_EQ(task1["state"], "RUNNING") << "task 1 (5 s) should outlive the dependent job";
  EXPECT_EQ(d.show(whole)["state"], "PENDING");  // the whole array: task 1 too
  EXPECT_EQ(d.show(after1)["state"], "PENDING");
  EXPECT_GE(done["start_ms"].get<int64_t>(), d.show(arr)["end_ms"].get<int64_t>());
  EXPECT_GE(d.wait_final(after1, 30)["start_ms"].get<int64_t>(),
            d.show(arr + 1)["end_ms"].get<int64_t>());
  EXPECT_EQ(d.wait_final(whole, 30)["state"], "COMPLETED");
  Result none = d.gpuq(fmt::format("submit -d afterok:{}_7 {}", arr, ok));
  EXPECT_NE(none.rc, 0);
  EXPECT_NE(none.err.find(fmt::format("job dependency problem: job {}_7 does not exist", arr)),
            std::string::npos)
      << none.err;
}

TEST(GpuqE2E, PerUserGpuLimit) {
  Daemon d({"--max-gpus-per-user", "1"});
  d.script("iv.sh", kIntervalJob);
  std::vector<int64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(d.submit("--gpus=1 --export=LOG iv.sh"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto q = d.gpuq("queue").out;
  EXPECT_NE(q.find("QOSMaxGRESPerUser"), std::string::npos) << q;
  for (auto id : ids) d.wait_final(id, 30);
  EXPECT_EQ(check_exclusive(read_intervals(d.dir() + "/intervals.log")), 1);
  // A job above the limit could never run: refused at submit, not left pending forever.
  Result big = d.gpuq(fmt::format("submit --gpus=2 {}/iv.sh", d.dir()));
  EXPECT_NE(big.rc, 0);
  EXPECT_NE(big.err.find("asks for 2 GPUs but a user may hold at most 1"), std::string::npos)
      << big.err;
}

TEST(GpuqE2E, ArrayIdActsOnEveryTask) {
  Daemon d;
  d.script("first_quick.sh",
           "#!/bin/bash\nif [ \"$GPUQ_ARRAY_TASK_ID\" != 0 ]; then sleep 30; fi\n");
  int64_t a = d.submit("--array=0-3%2 first_quick.sh");
  EXPECT_EQ(d.wait_final(a)["state"], "COMPLETED");  // task 0 ends at once
  d.wait_state(a + 1, "RUNNING");
  d.wait_state(a + 2, "RUNNING");
  // Tasks that started or ended are skipped, not errors; the pending one is held.
  Result h = d.gpuq(fmt::format("hold {}", a));
  EXPECT_EQ(h.rc, 0) << h.err;
  EXPECT_EQ(d.show(a + 3)["reason"], "JobHeldUser");
  Result c = d.gpuq(fmt::format("cancel {}", a));
  EXPECT_EQ(c.rc, 0) << c.err;
  for (int i = 1; i < 4; ++i) EXPECT_EQ(d.wait_final(a + i)["state"], "CANCELLED");
  EXPECT_EQ(d.show(a)["state"], "COMPLETED");
  EXPECT_NE(d.gpuq(fmt::format("cancel {}_0", a)).rc, 0);  // one finished task, by name: an error
}

// squeue --start: each pending job's place in the order and its expected start, from the time
// limits of the jobs ahead, in `gpuq queue --start`, `gpuq show` and /api/status.
TEST(GpuqSched, PendingJobsShowTheirPositionAndExpectedStart) {
  Daemon d({}, "0");
  d.script("long.sh", "#!/bin/sh\nsleep 60\n");
  int64_t a = d.submit("--gres=gpu:1 --time=10 long.sh");
  auto running = d.wait_state(a, "RUNNING", 20);
  int64_t b = d.submit("--gres=gpu:1 --time=5 long.sh");
  int64_t c = d.submit("--gres=gpu:1 --time=5 long.sh");
  const int64_t start_a = running["start_ms"].get<int64_t>();
  nlohmann::json pending;
  for (int i = 0; i < 50; ++i) {  // the scheduler's pass after the submits
    pending = d.request(R"({"op":"status"})")["pending"];
    if (pending.size() == 2 && pending[1].value("position", 0) == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0]["job_id"], b);
  EXPECT_EQ(pending[0]["position"], 1);
  EXPECT_EQ(pending[0]["expected_start_ms"], start_a + 600'000);
  EXPECT_EQ(pending[1]["position"], 2);
  EXPECT_EQ(pending[1]["expected_start_ms"], start_a + 900'000);
  const std::string when_b = gpurun::queue::local_time(start_a + 600'000);
  Result q = d.gpuq("queue --start");
  EXPECT_NE(q.out.find("START_TIME  POS"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find(when_b + "    1"), std::string::npos) << q.out;
  Result s = d.gpuq(fmt::format("show {}", c));
  EXPECT_NE(s.out.find("StartTime=" + gpurun::queue::local_time(start_a + 900'000)),
            std::string::npos)
      << s.out;
  EXPECT_NE(s.out.find("Position=2"), std::string::npos) << s.out;
  for (int64_t id : {a, b, c}) d.gpuq(fmt::format("cancel {}", id));
}

// End-to-end `gpuq requeue` (scontrol requeue): a running job is stopped and goes back to the
// queue under its id with restart_count + 1, its GPU freed, and runs again; what it refuses
// (pending, finished, --no-requeue, another user's job); and a daemon killed with -9 between the
// request and the job's end loses no requeue.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "harness.h"

using namespace gpuq_test;

namespace {

// Jobs that run `gpuq requeue` find it on PATH, as gpurun --requeue does.
int64_t submit_with_gpuq_on_path(const Daemon& d, const std::string& args) {
  const std::string bin_dir = std::filesystem::path(gpuq_bin()).parent_path().string();
  return d.submit(args, fmt::format("PATH={}:$PATH", bin_dir));
}

std::string output_of(const Daemon& d, const std::string& name) {
  return read_text(fmt::format("{}/{}", d.dir(), name));
}

// A batch script that prints `echo` and requeues itself on its first run. The trap defers the
// requeue's SIGTERM to the shell until `gpuq requeue` has returned, so its status can be written
// down (requeue-rc.txt); then SIGKILL, after --kill-wait, ends the first run.
std::string self_requeue_script(const std::string& directives, const std::string& echo) {
  return "#!/bin/bash\n" + directives + "echo \"" + echo + "\"\n" +
         "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then\n"
         "  trap : TERM\n"
         "  gpuq requeue \"$SLURM_JOB_ID\"; echo \"requeue rc=$?\" >> requeue-rc.txt\n"
         "  sleep 30 & wait\nfi\n";
}

nlohmann::json status_file(const Daemon& d, int64_t id) {
  return nlohmann::json::parse(read_text(fmt::format("{}/state/run/{}.status", d.dir(), id)));
}

}  // namespace

// The job requeues itself on its first run: the rerun has the same id, SLURM_RESTART_COUNT=1 and
// ends COMPLETED. Before `gpuq requeue` existed the command failed and the job ran once.
TEST(GpuqRequeue, AJobRequeuesItselfAndRunsAgain) {
  Daemon d({"--check-invariants", "--kill-wait", "2"}, "0");
  d.script("self.sh", self_requeue_script("#SBATCH --requeue\n#SBATCH --gres=gpu:1\n",
                                          "run restarts=$SLURM_RESTART_COUNT gpus=$SLURM_JOB_GPUS"));
  const int64_t id = submit_with_gpuq_on_path(d, "self.sh");
  auto j = d.wait_final(id, 20);
  const std::string out = output_of(d, fmt::format("slurm-{}.out", id));
  EXPECT_EQ(j["state"], "COMPLETED") << out << d.log();
  EXPECT_EQ(j["restart_count"], 1) << d.log();
  EXPECT_EQ(out, "run restarts=1 gpus=0\n");  // the rerun's (the output file starts afresh)
  // The client held the SIGTERM the requeue sent its own process group until it had the answer.
  EXPECT_EQ(output_of(d, "requeue-rc.txt"), "requeue rc=0\n");
  const std::string log = d.log();
  EXPECT_NE(log.find(fmt::format("job {} (self.sh, ", id)), std::string::npos) << log;
  EXPECT_NE(log.find("requeue requested by uid " + std::to_string(getuid())), std::string::npos)
      << log;
  EXPECT_NE(log.find("requeued (Requeued by " + std::to_string(getuid()) + ")"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("invariants broken"), std::string::npos) << log;
}

// Requeued from outside while it runs: stopped as a cancel stops it (with Slurm's "DUE TO JOB
// REQUEUE" line), PENDING again with its GPU free (drained, so it waits), then run again.
TEST(GpuqRequeue, ARunningJobIsStoppedAndQueuedAgain) {
  Daemon d({"--check-invariants"}, "0");
  d.script("twice.sh",
           "#!/bin/bash\necho \"run $SLURM_RESTART_COUNT\" >> runs.txt\n"
           "if [ \"$SLURM_RESTART_COUNT\" = 0 ]; then sleep 30; fi\n");
  const int64_t id = d.submit("--gpus 1 --error twice.err twice.sh");
  d.wait_state(id, "RUNNING");
  ASSERT_EQ(d.gpuq("drain").rc, 0);
  Result r = d.gpuq(fmt::format("requeue {0} {0}", id));  // asked twice is asked once
  ASSERT_EQ(r.rc, 0) << r.err;
  auto pending = d.wait_state(id, "PENDING", 10);
  EXPECT_EQ(pending["restart_count"], 1);
  EXPECT_TRUE(pending["gpus"].empty()) << pending.dump();
  EXPECT_FALSE(pending["requeue_requested"].get<bool>());
  EXPECT_NE(read_text(fmt::format("{}/twice.err", d.dir())).find("DUE TO JOB REQUEUE ***"),
            std::string::npos);
  ASSERT_EQ(d.gpuq("resume").rc, 0);
  auto j = d.wait_final(id, 30);
  EXPECT_EQ(j["state"], "COMPLETED");
  EXPECT_EQ(j["restart_count"], 1);
  EXPECT_EQ(j["gpus"], nlohmann::json::array({0}));
  EXPECT_EQ(read_text(fmt::format("{}/runs.txt", d.dir())), "run 0\nrun 1\n");
  EXPECT_EQ(d.log().find("invariants broken"), std::string::npos) << d.log();
}

// One task of an array, named N_T as gpurun names it: the first task's own id is the array's,
// which would requeue every task. The other task runs once.
TEST(GpuqRequeue, AnArrayTaskRequeuesItselfAlone) {
  Daemon d({"--check-invariants"});
  d.script("array.sh",
           "#!/bin/bash\n#SBATCH --array=0-1\n#SBATCH --gres=gpu:1\n"
           "echo \"task $SLURM_ARRAY_TASK_ID run $SLURM_RESTART_COUNT\" >> runs.txt\n"
           "if [ \"$SLURM_ARRAY_TASK_ID\" = 0 ] && [ \"$SLURM_RESTART_COUNT\" = 0 ]; then\n"
           "  gpuq requeue \"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"; sleep 30\nfi\n"
           "sleep 1\n");
  const int64_t first = submit_with_gpuq_on_path(d, "array.sh");
  auto t0 = d.wait_final(first, 30);
  auto t1 = d.wait_final(first + 1, 30);
  EXPECT_EQ(t0["state"], "COMPLETED");
  EXPECT_EQ(t0["restart_count"], 1);
  EXPECT_EQ(t1["state"], "COMPLETED");
  EXPECT_EQ(t1["restart_count"], 0);
  auto runs = lines(read_text(fmt::format("{}/runs.txt", d.dir())));
  std::sort(runs.begin(), runs.end());
  EXPECT_EQ(runs, (std::vector<std::string>{"task 0 run 0", "task 0 run 1", "task 1 run 0"}));
}

// What scontrol refuses, gpuq refuses, saying why, with a non-zero status: a pending job, a
// finished one (gpuq keeps a finished run as history), one submitted with --no-requeue, a gpuq run
// job (srun's are not requeued either), an unknown id.
TEST(GpuqRequeue, RefusesWhatCannotBeRequeued) {
  Daemon d({}, "0");
  d.script("quick.sh", "#!/bin/sh\necho hi\n");
  d.script("long.sh", "#!/bin/sh\nsleep 30\n");
  const int64_t done = d.submit("quick.sh");
  d.wait_final(done);
  const int64_t held = d.submit("--hold long.sh");
  const int64_t no = d.submit("--gpus 1 --no-requeue long.sh");
  d.wait_state(no, "RUNNING");
  sh(fmt::format("cd {} && ({} run -- sleep 30 </dev/null >/dev/null 2>&1 &)", d.dir(), d.cli()));
  const int64_t attached = no + 1;
  d.wait_state(attached, "RUNNING");
  d.expect_refused(
      {{fmt::format("requeue {}", held), fmt::format("job {} is pending: only a running job", held)},
       {fmt::format("requeue {}", done), fmt::format("job {} has already finished", done)},
       {fmt::format("requeue {}", no), fmt::format("job {} was submitted with --no-requeue", no)},
       {fmt::format("requeue {}", attached),
        fmt::format("job {} is interactive (gpuq run or alloc): only batch jobs", attached)},
       {"requeue 999", "invalid job id '999'"}});
  EXPECT_EQ(d.show(no)["state"], "RUNNING");
  EXPECT_EQ(d.show(held)["state"], "PENDING");
  EXPECT_EQ(d.show(done)["restart_count"], 0);
  Result none = d.gpuq("requeue");
  EXPECT_NE(none.rc, 0);
  EXPECT_NE(none.err.find("no job id given"), std::string::npos) << none.err;
  d.gpuq(fmt::format("cancel {} {} {}", held, no, attached));
}

// kill -9 of the daemon after it acknowledged a requeue and before the job ended: one job ends
// while no daemon runs (its end is found, and requeued, not recorded COMPLETED), the other is
// still stopping when the next daemon adopts it. Both run again once, and end COMPLETED.
TEST(GpuqRequeue, SurvivesADaemonKilledBeforeTheJobEnded) {
  Daemon d({"--check-invariants"}, "0,1");
  // The first run takes `$1` seconds to stop after SIGTERM; the rerun ends at once.
  d.script("slow.sh",
           "#!/bin/bash\necho \"run $SLURM_RESTART_COUNT\" >> runs-$SLURM_JOB_ID.txt\n"
           "[ \"$SLURM_RESTART_COUNT\" = 0 ] || exit 0\n"
           "trap 'sleep $1; exit 0' TERM\nsleep 30 & wait\n");
  const int64_t fast = d.submit("--gpus 1 slow.sh 0.2");
  const int64_t slow = d.submit("--gpus 1 slow.sh 4");
  d.wait_state(fast, "RUNNING");
  d.wait_state(slow, "RUNNING");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both traps are set
  Result r = d.gpuq(fmt::format("requeue {} {}", fast, slow));
  ASSERT_EQ(r.rc, 0) << r.err;
  d.kill9();
  for (int i = 0; i < 100 && status_file(d, fast)["phase"] != "done"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(status_file(d, fast)["phase"], "done");
  ASSERT_EQ(status_file(d, slow)["phase"], "running");  // still in its 4 s trap
  d.start();
  for (int64_t id : {fast, slow}) {
    auto j = d.wait_final(id, 30);
    EXPECT_EQ(j["state"], "COMPLETED") << id << " " << d.log();
    EXPECT_EQ(j["restart_count"], 1) << id;
    EXPECT_EQ(read_text(fmt::format("{}/runs-{}.txt", d.dir(), id)), "run 0\nrun 1\n") << id;
  }
  EXPECT_EQ(d.log().find("invariants broken"), std::string::npos) << d.log();
}

// Only the job's owner (or root) may requeue it: another user is refused and the job runs on
// untouched; its owner's requeue works.
TEST(GpuqRequeue, AnotherUserCannotRequeueSomeonesJob) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create users and run a root daemon";
  Daemon d;
  TestUser alice("gqra"), bob("gqrb");
  const std::string work = d.dir() + "/alice";
  sh(fmt::format("mkdir -p {0} && chown {1} {0} && chmod 700 {0}", work, alice.name()));
  const std::string cli = d.cli();
  Result s = alice.run(fmt::format(
      "cd {} && printf \"#!/bin/sh\\necho run \\$SLURM_RESTART_COUNT >> runs.txt\\nsleep 30\\n\" "
      "> job.sh && {} submit --parsable --gpus 1 job.sh",
      work, cli));
  ASSERT_EQ(s.rc, 0) << s.err;
  const int64_t id = std::stoll(s.out);
  d.wait_state(id, "RUNNING");

  Result b = bob.run(fmt::format("{} requeue {}", cli, id));
  EXPECT_NE(b.rc, 0);
  EXPECT_NE(b.err.find(fmt::format("cannot requeue job {}: permission denied: job {} belongs to {}",
                                   id, id, alice.name())),
            std::string::npos)
      << b.err;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto j = d.show(id);
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["restart_count"], 0);
  EXPECT_FALSE(j["requeue_requested"].get<bool>());

  Result a = alice.run(fmt::format("{} requeue {}", cli, id));
  EXPECT_EQ(a.rc, 0) << a.err;
  for (int i = 0; i < 200 && d.show(id)["restart_count"] != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(d.show(id)["restart_count"], 1);
  EXPECT_EQ(alice.run(fmt::format("{} cancel {}", cli, id)).rc, 0);
  EXPECT_EQ(d.wait_final(id)["state"], "CANCELLED");
}

// With --open-mode=append the rerun after a requeue appends, and the first run's lines (its
// checkpoint messages) stay; without it the rerun starts the file afresh (the test above).
TEST(GpuqRequeue, OpenModeAppendKeepsTheFirstRunsOutput) {
  Daemon d({"--kill-wait", "2"}, "0");
  d.script("self.sh", self_requeue_script("#SBATCH --open-mode=append\n",
                                          "run restarts=$SLURM_RESTART_COUNT"));
  const int64_t id = submit_with_gpuq_on_path(d, "self.sh");
  auto j = d.wait_final(id, 20);
  const std::string out = d.output(id);
  EXPECT_EQ(j["state"], "COMPLETED") << out << d.log();
  EXPECT_EQ(out.rfind("run restarts=0\nslurmstepd: error: *** JOB ", 0), 0u) << out;
  EXPECT_NE(out.find(" DUE TO JOB REQUEUE ***\nrun restarts=1\n"), std::string::npos) << out;
}

// `gpuq log -f` of a job requeued while it follows: the rerun starts the output file again, and
// the follower prints the rerun's output from its start (it went on from its old offset and lost
// the rerun's first line).
TEST(GpuqRequeue, LogFollowPrintsTheRerunFromItsStart) {
  Daemon d({"--kill-wait", "1"}, "0");
  d.script("twice.sh",
           "#!/bin/sh\necho \"run $SLURM_RESTART_COUNT\"\nsleep 2\necho \"end $SLURM_RESTART_COUNT\"\n");
  const int64_t id = d.submit("twice.sh");
  d.wait_state(id, "RUNNING");
  const std::string followed = d.dir() + "/followed.txt";
  sh(fmt::format("({} log -f {} > {} 2>&1 &)", d.cli(), id, followed));
  for (int i = 0; i < 100 && read_text(followed).find("run 0") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(d.gpuq(fmt::format("requeue {}", id)).rc, 0);
  EXPECT_EQ(d.wait_final(id, 30)["restart_count"], 1);
  std::string out;
  for (int i = 0; i < 100 && (out = read_text(followed)).find("end 1") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(out.find("run 0\n"), 0u) << out;
  EXPECT_EQ(out.find("run 0\n", 1), std::string::npos) << "the first run twice: " << out;
  EXPECT_NE(out.find("run 1\nend 1\n"), std::string::npos) << out;
}

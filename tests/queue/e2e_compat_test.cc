// End-to-end: gpuq behaves as a cluster user expects from Slurm (issue 25, "First contact"):
// Slurm's reason line in the output file when a job is stopped, `submit --wait` returning the
// job's exit code, and one line per job event in the daemon's log (the audit trail).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <regex>
#include <thread>

#include "gpurun/common/posix.h"
#include "harness.h"

using namespace gpuq_test;

namespace {

std::string short_host() {
  std::string h = gpurun::common::hostname();
  return h.substr(0, h.find('.'));
}

// slurmstepd's words (src/slurmd/slurmstepd/req.c), with the job's id and this host.
std::regex reason_line(int64_t id, const std::string& due_to) {
  return std::regex(
      fmt::format("(^|\n)slurmstepd: error: \\*\\*\\* JOB {} ON {} CANCELLED AT "
                  "[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}T[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}{} \\*\\*\\*\n",
                  id, short_host(), due_to));
}

}  // namespace

// A job stopped at its time limit, or cancelled, has Slurm's line in its output file, where users
// look for why it stopped (gpuq wrote nothing there).
TEST(GpuqCompat, TimeoutAndCancelLeaveSlurmsReasonLine) {
  Daemon d({"--kill-wait", "1"});
  d.script("slow.sh", "#!/bin/sh\n#SBATCH -t 0:01\necho started\nsleep 30\n");
  d.script("sleep.sh", "#!/bin/sh\necho started\nsleep 30\n");
  const int64_t to = d.submit("slow.sh");
  const int64_t ca = d.submit("sleep.sh");
  d.wait_state(ca, "RUNNING");
  for (int i = 0; i < 100 && read_text(fmt::format("{}/slurm-{}.out", d.dir(), ca)).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(d.gpuq(fmt::format("cancel {}", ca)).rc, 0);
  EXPECT_EQ(d.wait_final(to)["state"], "TIMEOUT");
  EXPECT_EQ(d.wait_final(ca)["state"], "CANCELLED");
  const std::string to_out = read_text(fmt::format("{}/slurm-{}.out", d.dir(), to));
  const std::string ca_out = read_text(fmt::format("{}/slurm-{}.out", d.dir(), ca));
  EXPECT_TRUE(std::regex_search(to_out, reason_line(to, " DUE TO TIME LIMIT"))) << to_out;
  EXPECT_TRUE(std::regex_search(ca_out, reason_line(ca, ""))) << ca_out;
  EXPECT_EQ(to_out.rfind("started\n", 0), 0u) << "the line follows the job's own output";
}

// sbatch --wait: `gpuq submit --wait` returns once the job has ended, with its exit code (the
// highest of an array's tasks; 1 for a job a signal ended). gpuq accepted --wait and ignored it.
TEST(GpuqCompat, SubmitWaitReturnsTheJobsExitCode) {
  Daemon d;
  d.script("three.sh", "#!/bin/sh\nsleep 0.5\nexit 3\n");
  d.script("array.sh", "#!/bin/sh\n#SBATCH --array=1-4\nexit $SLURM_ARRAY_TASK_ID\n");
  d.script("killed.sh", "#!/bin/sh\nkill -KILL $$\n");
  Result r = sh(fmt::format("cd {} && {} submit --wait three.sh", d.dir(), d.cli()));
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(r.out.rfind("Submitted batch job ", 0), 0u) << r.out;
  const int64_t id = std::stoll(r.out.substr(20));
  EXPECT_EQ(d.show(id)["state"], "FAILED") << "--wait returned before the job ended";
  EXPECT_EQ(sh(fmt::format("cd {} && {} submit -W array.sh", d.dir(), d.cli())).rc, 4);
  EXPECT_EQ(sh(fmt::format("cd {} && {} submit --wait killed.sh", d.dir(), d.cli())).rc, 1);
  d.script("ok.sh", "#!/bin/sh\n#SBATCH --wait\ntrue\n");  // as a directive too
  Result ok = sh(fmt::format("cd {} && {} submit --parsable ok.sh", d.dir(), d.cli()));
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(d.show(std::stoll(ok.out))["state"], "COMPLETED");
}

// One line per job event in the daemon's log, with the time, the job, its owner and who acted:
// submit, start, cancel (by uid), end (state and exit code), requeue. The daemon logged nothing
// per job.
TEST(GpuqCompat, TheDaemonLogsEveryJobEvent) {
  Daemon d({"--kill-wait", "1"});
  d.script("ok.sh", "#!/bin/sh\n#SBATCH -J audited\nexit 0\n");
  d.script("sleep.sh", "#!/bin/sh\n#SBATCH --requeue\nsleep 30\n");
  const int64_t ok = d.submit("--gres=gpu:2 ok.sh");
  EXPECT_EQ(d.wait_final(ok)["state"], "COMPLETED");
  const int64_t rq = d.submit("sleep.sh");
  d.wait_state(rq, "RUNNING");
  // Its supervisor dies mid-job: NODE_FAIL, requeued (--requeue), started again, then cancelled.
  // RUNNING is committed before the supervisor starts and writes its status: wait for the file
  // (bounded; it is written whole, by rename), or a busy machine reads it absent.
  const std::string status_path = fmt::format("{}/state/run/{}.status", d.dir(), rq);
  for (int i = 0; i < 200 && read_text(status_path).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto st = nlohmann::json::parse(read_text(status_path));
  ::kill(st["supervisor_pid"].get<int>(), SIGKILL);
  for (int i = 0; i < 200 && d.show(rq)["restart_count"] == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  d.wait_state(rq, "RUNNING");
  ASSERT_EQ(d.gpuq(fmt::format("cancel {}", rq)).rc, 0);
  d.wait_final(rq);
  const std::string log = d.log();
  const std::string stamp = "gpuq daemon: [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z job ";
  for (const std::string& want :
       {fmt::format("{}{} \\(audited, root\\): submitted by uid 0, 2 GPU\\(s\\)", stamp, ok),
        fmt::format("{}{} \\(audited, root\\): started on GPU\\(s\\) [0-9],[0-9]", stamp, ok),
        fmt::format("{}{} \\(audited, root\\): ended COMPLETED, exit code 0:0", stamp, ok),
        fmt::format("{}{} \\(sleep.sh, root\\): requeued \\(the supervisor of job {} died\\)",
                    stamp, rq, rq),
        fmt::format("{}{} \\(sleep.sh, root\\): cancel requested by uid 0", stamp, rq),
        fmt::format("{}{} \\(sleep.sh, root\\): ended CANCELLED, exit code 0:15, CANCELLED by 0",
                    stamp, rq)})
    EXPECT_TRUE(std::regex_search(log, std::regex(want))) << want << "\n" << log;
}

// `srun` in a batch script, as most cluster scripts start their tasks: Slurm's srun finds no
// controller in a gpuq job ("Could not establish a configuration source") and the job failed.
// The job's PATH now starts with gpuq's srun, which runs the step here: -n tasks (default the
// job's), each with srun's variables and all the job's GPUs, labels with -l, the highest exit
// status, and a clear refusal of what one machine cannot do.
TEST(GpuqCompat, SrunInAJobRunsTheStepsTasksHere) {
  Daemon d;
  d.script("step.sh",
           "#!/bin/sh\n#SBATCH -n 3\n#SBATCH --gres=gpu:2\n"
           "srun sh -c 'echo task=$SLURM_PROCID/$SLURM_NTASKS local=$SLURM_LOCALID "
           "step=$SLURM_STEP_ID gpus=$CUDA_VISIBLE_DEVICES' | sort\n"
           "srun -l -n 2 --mpi=pmix echo hi | sort\n"
           "srun -n 2 sh -c 'exit $SLURM_PROCID' 2>/dev/null; echo rc=$?\n"
           "t0=$(date +%s); srun -K -n 2 sh -c '[ $SLURM_PROCID = 1 ] && exit 3; exec sleep 30' "
           "2>/dev/null; echo k=$? fast=$(( $(date +%s) - t0 < 10 ))\n"
           "srun -o x.txt true 2>&1; echo refused=$?\n"
           "srun -N 2 true 2>&1; echo nodes=$?\n");
  const int64_t id = d.submit("step.sh");
  auto j = d.wait_final(id, 60);
  const std::string out = d.output(id);
  ASSERT_EQ(j["state"], "COMPLETED") << out;
  const std::string gpus =
      fmt::format("{},{}", j["gpus"].at(0).get<int>(), j["gpus"].at(1).get<int>());
  EXPECT_EQ(lines(out),
            (std::vector<std::string>{
                fmt::format("task=0/3 local=0 step=0 gpus={}", gpus),
                fmt::format("task=1/3 local=1 step=0 gpus={}", gpus),
                fmt::format("task=2/3 local=2 step=0 gpus={}", gpus), "0: hi", "1: hi", "rc=1",
                "k=143 fast=1",
                "srun -o: not supported inside a gpuq job (the tasks write to the job's output; "
                "redirect in the script, or use gpuq run --pty for a terminal)",
                "refused=1",
                "srun -N 2: a gpuq job has one machine (run the tasks here with -n)", "nodes=1"}))
      << out;
  // What a user review tried next: each task its own GPUs, srun's --export and -D, options
  // that only place or account (refused before, failing the step), and -n above the job's.
  d.script("more.sh",
           "#!/bin/sh\n#SBATCH -n 2\n#SBATCH --gres=gpu:4\n"
           "srun --gpus-per-task=2 --jobid=$SLURM_JOB_ID -W 30 --hint=nomultithread -p x -A y -O "
           "sh -c 'echo task=$SLURM_PROCID gpus=$CUDA_VISIBLE_DEVICES' | sort\n"
           "FOO=bar srun -n 1 --export=ALL,LR=0.1 sh -c 'echo lr=$LR foo=$FOO'\n"
           "FOO=bar srun -n 1 --export=NONE sh -c 'echo foo=${FOO-unset} job=${SLURM_JOB_ID:+set}'\n"
           "mkdir -p sub && srun -n 1 -D sub pwd\n"
           "srun -n 3 true 2>&1; echo over=$?\n"
           "echo node=$SLURMD_NODENAME\n");
  const int64_t more = d.submit("more.sh");
  auto m = d.wait_final(more, 60);
  const std::string mout = d.output(more);
  ASSERT_EQ(m["state"], "COMPLETED") << mout;
  std::vector<std::string> g;
  for (const auto& id : m["gpus"]) g.push_back(std::to_string(id.get<int>()));
  EXPECT_EQ(lines(mout),
            (std::vector<std::string>{
                fmt::format("task=0 gpus={},{}", g.at(0), g.at(1)),
                fmt::format("task=1 gpus={},{}", g.at(2), g.at(3)), "lr=0.1 foo=bar",
                "foo=unset job=set", d.dir() + "/sub",
                "srun: -n 3 is more than the job's 2 task(s) (submit it with -n 3)", "over=1",
                "node=" + short_host()}))
      << mout;
  Result outside = sh(fmt::format("env -u GPUQ_JOB_ID {}/bin/srun true", d.dir() + "/state"));
  EXPECT_NE(outside.rc, 0);
  EXPECT_NE(outside.err.find("srun: not inside a gpuq job"), std::string::npos) << outside.err;
}

// A CPU job (no GPUs): srun's tasks get no empty SLURM_STEP_GPUS, and queue -l names no GPUs
// ("vm gpu:" before).
TEST(GpuqCompat, ACpuJobNamesNoGpus) {
  Daemon d;
  d.script("cpu.sh", "#!/bin/sh\nsrun sh -c 'echo step_gpus=${SLURM_STEP_GPUS-unset}'\nsleep 30\n");
  const int64_t id = d.submit("cpu.sh");
  d.wait_state(id, "RUNNING");
  auto row = lines(d.gpuq("queue -l --noheader").out);
  ASSERT_EQ(row.size(), 1u);
  EXPECT_EQ(row[0].find("gpu:"), std::string::npos) << row[0];
  for (int i = 0; i < 100 && d.output(id).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(d.output(id), "step_gpus=unset\n");
  ASSERT_EQ(d.gpuq(fmt::format("cancel {}", id)).rc, 0);
}

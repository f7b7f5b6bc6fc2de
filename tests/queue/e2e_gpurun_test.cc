// End-to-end contract with gpurun: inside a gpuq job, gpurun detects the gpuq scheduler from the
// job's environment and starts one rank per allocated GPU, each seeing only its own real GPU id.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness.h"

using namespace gpuq_test;

namespace {

// Submits a script of d's work dir with $GPURUN set (and `env`, "K=V ..."); returns the job id.
int64_t submit_with_gpurun(const Daemon& d, const std::string& script, const std::string& env = "") {
  return d.submit(script, fmt::format("GPURUN={} {}", GPURUN_BIN, env));
}

// The lines of `text` that start with one of `prefixes`, sorted (ranks print in any order).
std::vector<std::string> sorted_lines(const std::string& text,
                                      const std::vector<std::string>& prefixes) {
  std::vector<std::string> out;
  for (const auto& l : lines(text))
    for (const auto& p : prefixes)
      if (l.rfind(p, 0) == 0) {
        out.push_back(l);
        break;
      }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(GpuqGpurun, OneRankPerAllocatedGpu) {
  Daemon d({}, "2,3,5,7");  // ids that are not 0..N-1, so positions and ids cannot be confused
  d.script("ranks.sh",
           "#!/bin/sh\n#SBATCH --gres=gpu:2\n"
           "exec \"$GPURUN\" --launcher local -- sh -c 'echo \"rank=$RANK local=$LOCAL_RANK "
           "world=$WORLD_SIZE cvd=$CUDA_VISIBLE_DEVICES sched=$GPURUN_SCHEDULER "
           "job=$GPURUN_JOB_ID\"'\n");
  d.script("blocker.sh", "#!/bin/sh\n#SBATCH --gres=gpu:1\nsleep 30\n");
  int64_t blocker = d.submit("blocker.sh");  // takes GPU 2, so the job gets 3 and 5
  d.wait_state(blocker, "RUNNING");
  Result r = sh(fmt::format("cd {} && GPURUN={} {} submit --parsable ranks.sh", d.dir(), GPURUN_BIN,
                            d.cli()));
  ASSERT_EQ(r.rc, 0) << r.err;
  int64_t job = std::stoll(r.out);
  auto j = d.wait_final(job, 60);
  EXPECT_EQ(j["state"], "COMPLETED") << d.output(job);
  auto out = lines(d.output(job));
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const std::string& l) { return l.rfind("rank=", 0) != 0; }),
            out.end());
  std::sort(out.begin(), out.end());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], fmt::format("rank=0 local=0 world=2 cvd=3 sched=gpuq job={}", job));
  EXPECT_EQ(out[1], fmt::format("rank=1 local=1 world=2 cvd=5 sched=gpuq job={}", job));
  d.gpuq(fmt::format("cancel {}", blocker));
}

// A cluster array script runs unchanged (issue 25): each task reads Slurm's variables, with the
// task ids 0..N-1, and gpurun inside the task still finds gpuq (GPUQ_JOB_ID wins over the
// SLURM_JOB_ID gpuq sets). gpuq stripped SLURM_* (empty ids), then gpurun said "scheduler slurm".
TEST(GpuqGpurun, ArrayScriptReadsSlurmVariablesAndGpurunSaysGpuq) {
  Daemon d;
  d.script("array.sh",
           "#!/bin/bash\n#SBATCH --array=0-3\n#SBATCH --gres=gpu:1\n#SBATCH -c 2\n#SBATCH -n 3\n"
           "echo \"task=$SLURM_ARRAY_TASK_ID array=$SLURM_ARRAY_JOB_ID job=$SLURM_JOB_ID "
           "jobid=$SLURM_JOBID min=$SLURM_ARRAY_TASK_MIN max=$SLURM_ARRAY_TASK_MAX "
           "count=$SLURM_ARRAY_TASK_COUNT step=$SLURM_ARRAY_TASK_STEP name=$SLURM_JOB_NAME "
           "dir=$SLURM_SUBMIT_DIR nodes=$SLURM_JOB_NUM_NODES ntasks=$SLURM_NTASKS "
           "cpus=$SLURM_CPUS_PER_TASK gpus=$SLURM_JOB_GPUS on_node=$SLURM_GPUS_ON_NODE "
           "restarts=$SLURM_RESTART_COUNT\"\n"
           "\"$GPURUN\" info | head -1\n");
  Result r = sh(fmt::format("cd {} && GPURUN={} SLURM_JOB_ID=99 {} submit --parsable array.sh",
                            d.dir(), GPURUN_BIN, d.cli()));
  ASSERT_EQ(r.rc, 0) << r.err;
  const int64_t first = std::stoll(r.out);
  for (int task = 0; task < 4; ++task) {
    const int64_t id = first + task;
    auto j = d.wait_final(id, 60);
    const std::string out = read_text(fmt::format("{}/slurm-{}_{}.out", d.dir(), first, task));
    EXPECT_EQ(j["state"], "COMPLETED") << out;
    const std::string gpu = j["gpus"].empty() ? "?" : std::to_string(j["gpus"][0].get<int>());
    EXPECT_EQ(lines(out).at(0),
              fmt::format("task={} array={} job={} jobid={} min=0 max=3 count=4 step=1 "
                          "name=array.sh dir={} nodes=1 ntasks=3 cpus=2 gpus={} on_node=1 "
                          "restarts=0",
                          task, first, id, id, d.dir(), gpu));
    EXPECT_EQ(lines(out).at(1), fmt::format("scheduler   gpuq (gpuq), job {}", id)) << out;
  }
}

// Open MPI's mpirun in a gpuq job, as a cluster script calls it and as gpurun's default engine
// does. gpuq sets SLURM_JOBID, and from it Open MPI reads the job's nodes and slots from Slurm's
// variables; without SLURM_NODELIST and SLURM_TASKS_PER_NODE it stopped before starting a rank
// (first seen on a GPU machine: every gpurun in a gpuq job failed, unless --launcher local).
TEST(GpuqGpurun, MpirunAndGpurunStartTheJobsTasks) {
  Daemon d;
  d.script("mpi.sh",
           "#!/bin/sh\n#SBATCH -n 2\n"
           "root=; [ \"$(id -u)\" = 0 ] && root=--allow-run-as-root\n"
           "mpirun $root sh -c 'echo mpi=$OMPI_COMM_WORLD_RANK/$OMPI_COMM_WORLD_SIZE'\n"
           "\"$GPURUN\" -n 2 -- sh -c 'echo rank=$RANK/$WORLD_SIZE'\n");
  const int64_t job = submit_with_gpurun(d, "mpi.sh");
  auto j = d.wait_final(job, 60);
  const std::string text = d.output(job);
  EXPECT_EQ(j["state"], "COMPLETED") << text;
  EXPECT_NE(text.find("via mpirun"), std::string::npos) << "gpurun's engine was not mpirun:\n"
                                                         << text;
  EXPECT_EQ(sorted_lines(text, {"mpi=", "rank="}),
            (std::vector<std::string>{"mpi=0/2", "mpi=1/2", "rank=0/2", "rank=1/2"}))
      << text;
}

// What a Slurm batch shell has, and what srun gives each task, in a gpuq job (a review found
// them missing): SLURM_PROCID/LOCALID/NODEID 0 in the batch shell, the job's user and its start
// and end (--time) in UNIX seconds, GPU_DEVICE_ORDINAL the job's GPUs and no other GPU list from
// the submitting shell. gpurun starts one rank per task (-n 3, more than the 1 GPU) with the
// task's CPUs (-c 2) and gives each rank its own SLURM_PROCID/LOCALID and SLURM_NTASKS; it reads
// the end, which --checkpoint-before needs. Before: 1 rank, OMP_NUM_THREADS from the machine's
// cores, every rank SLURM_PROCID unset, and "the job's end time is unknown".
TEST(GpuqGpurun, TasksCpusAndTheEndReachGpurunAndEachRank) {
  Daemon d;
  d.script("tasks.sh",
           "#!/bin/sh\n#SBATCH -n 3\n#SBATCH -c 2\n#SBATCH -t 10\n#SBATCH --gres=gpu:1\n"
           "echo \"batch procid=$SLURM_PROCID localid=$SLURM_LOCALID nodeid=$SLURM_NODEID "
           "user=$SLURM_JOB_USER uid=$SLURM_JOB_UID ord=$GPU_DEVICE_ORDINAL/$CUDA_VISIBLE_DEVICES "
           "rocr=${ROCR_VISIBLE_DEVICES-unset} nv=${NVIDIA_VISIBLE_DEVICES-unset} "
           "length=$((SLURM_JOB_END_TIME - SLURM_JOB_START_TIME))\"\n"
           "\"$GPURUN\" --launcher local -- sh -c 'echo \"rank=$RANK procid=$SLURM_PROCID "
           "localid=$SLURM_LOCALID ntasks=$SLURM_NTASKS omp=$OMP_NUM_THREADS\"'\n"
           "\"$GPURUN\" info --json | python3 -c 'import json, os, sys; "
           "print(\"end\", json.load(sys.stdin)[\"end_time\"] == int(os.environ[\"SLURM_JOB_END_TIME\"]))'\n");
  const int64_t job = submit_with_gpurun(
      d, "tasks.sh", "ROCR_VISIBLE_DEVICES=0,1 NVIDIA_VISIBLE_DEVICES=all GPU_DEVICE_ORDINAL=0,1,2,3");
  auto j = d.wait_final(job, 60);
  const std::string text = d.output(job);
  ASSERT_EQ(j["state"], "COMPLETED") << text;
  const std::string gpu = std::to_string(j["gpus"].at(0).get<int>());
  EXPECT_EQ(sorted_lines(text, {"batch ", "rank=", "end "}), (std::vector<std::string>{
                     fmt::format("batch procid=0 localid=0 nodeid=0 user=root uid=0 ord={0}/{0} "
                                 "rocr=unset nv=unset length=600",
                                 gpu),
                     "end True",
                     "rank=0 procid=0 localid=0 ntasks=3 omp=2",
                     "rank=1 procid=1 localid=1 ntasks=3 omp=2",
                     "rank=2 procid=2 localid=2 ntasks=3 omp=2"}))
      << text;
}

// The README's requeue flow (scripts/slurm/mnist_cnn.sbatch) in a gpuq job: --signal=B:USR1@N
// reaches gpurun, which forwards it to the rank; the rank checkpoints and exits 0; gpurun
// --requeue runs `gpuq requeue ID` (gpuq found on PATH, as scontrol is under Slurm); the rerun,
// same id and SLURM_RESTART_COUNT=1, resumes from the checkpoint and ends COMPLETED. gpurun used
// to say "--requeue: no requeue command for a gpuq job" and the job ended COMPLETED half done.
TEST(GpuqGpurun, RequeueAfterTheCheckpointSignalRunsTheJobAgain) {
  Daemon d;
  // The rank loops rather than waiting on a background sleep, which would outlive it holding its
  // output open, and gpurun waits for that before it requeues.
  d.script(
      "rank.sh",
      "#!/bin/bash\nck=\"$SLURM_SUBMIT_DIR/ckpt\"\n"
      "if [ -f \"$ck\" ]; then\n"
      "  echo \"resumed from step $(cat \"$ck\") restarts=$SLURM_RESTART_COUNT\" >> events.txt\n"
      "  exit 0\nfi\n"
      "trap 'echo 5 > \"$ck\"; echo checkpointed >> events.txt; exit 0' USR1\n"
      "echo \"training restarts=$SLURM_RESTART_COUNT\" >> events.txt\n"
      "for i in $(seq 300); do sleep 0.1; done\n");
  // The time limit is 8 s and the signal comes 6 s before it: 2 s into each run.
  d.script("train.sbatch",
           "#!/bin/bash\n#SBATCH --requeue\n#SBATCH --gres=gpu:1\n"
           "#SBATCH --time=0:08\n#SBATCH --signal=B:USR1@6\n"
           "exec \"$GPURUN\" --launcher local --requeue --checkpoint-signal USR1 -- ./rank.sh "
           "2>> \"gpurun-$SLURM_RESTART_COUNT.log\"\n");
  const std::string bin_dir = std::string(GPUQ_BIN).substr(0, std::string(GPUQ_BIN).rfind('/'));
  Result r = sh(fmt::format("cd {} && PATH={}:$PATH GPURUN={} {} submit --parsable train.sbatch",
                            d.dir(), bin_dir, GPURUN_BIN, d.cli()));
  ASSERT_EQ(r.rc, 0) << r.err;
  const int64_t id = std::stoll(r.out);
  auto j = d.wait_final(id, 60);
  const std::string first = read_text(fmt::format("{}/gpurun-0.log", d.dir()));
  EXPECT_EQ(j["state"], "COMPLETED") << first << d.log();
  EXPECT_EQ(j["restart_count"], 1) << first;
  EXPECT_EQ(read_text(fmt::format("{}/events.txt", d.dir())),
            "training restarts=0\ncheckpointed\nresumed from step 5 restarts=1\n")
      << first;
  EXPECT_NE(first.find(fmt::format("requeueing job {} (gpuq requeue {})", id, id)),
            std::string::npos)
      << first;
  EXPECT_NE(d.log().find("requeue requested by uid"), std::string::npos) << d.log();
}

// `srun gpurun -- CMD`, the usual Slurm form: under gpuq's srun each gpurun is one task of the
// step and runs its own rank (each of the n tasks started max(n, GPUs) ranks: n x n in all).
TEST(GpuqGpurun, GpurunUnderSrunRunsOneRankPerTask) {
  Daemon d;
  d.script("step.sh", "#!/bin/sh\n#SBATCH -n 2\n"
                      "srun \"$GPURUN\" -- sh -c 'echo rank=$RANK/$WORLD_SIZE procid=$SLURM_PROCID'\n");
  const int64_t job = submit_with_gpurun(d, "step.sh");
  auto j = d.wait_final(job, 60);
  const std::string text = d.output(job);
  EXPECT_EQ(j["state"], "COMPLETED") << text;
  EXPECT_EQ(sorted_lines(text, {"rank="}),
            (std::vector<std::string>{"rank=0/2 procid=0", "rank=1/2 procid=1"}))
      << text;
}

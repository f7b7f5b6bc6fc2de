// End-to-end contract with gpurun: inside a gpuq job, gpurun detects the gpuq scheduler from the
// job's environment and starts one rank per allocated GPU, each seeing only its own real GPU id.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "harness.h"

using namespace gpuq_test;

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
  EXPECT_EQ(j["state"], "COMPLETED") << read_text(fmt::format("{}/slurm-{}.out", d.dir(), job));
  auto out = lines(read_text(fmt::format("{}/slurm-{}.out", d.dir(), job)));
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const std::string& l) { return l.rfind("rank=", 0) != 0; }),
            out.end());
  std::sort(out.begin(), out.end());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], fmt::format("rank=0 local=0 world=2 cvd=3 sched=gpuq job={}", job));
  EXPECT_EQ(out[1], fmt::format("rank=1 local=1 world=2 cvd=5 sched=gpuq job={}", job));
  d.gpuq(fmt::format("cancel {}", blocker));
}

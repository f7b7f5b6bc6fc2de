// plan_test.cc: rank placement, GPU positions, master address/port, and the refusals that must
// happen before anything starts (with the numbers in the message).
#include <gtest/gtest.h>

#include "gpurun/launcher/error.h"
#include "gpurun/launcher/launch.h"
#include "gpurun/launcher/plan.h"
#include "test_support.h"

using namespace gpurun::launcher;
using fixtures::fixture;

namespace {

Allocation cluster(std::vector<NodeAlloc> nodes) {
  Allocation a;
  a.scheduler = Scheduler::slurm;
  a.flavor = "Slurm";
  a.job_id = "42";
  a.nodes = std::move(nodes);
  return a;
}

std::string error_of(const Allocation& a, const PlanOptions& o) {
  try {
    make_plan(a, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Plan, BlockPlacementOverUnevenNodes) {
  RankPlan p = make_plan(detect_allocation(fixture("slurm_batch.env")), {});
  ASSERT_EQ(p.world_size, 7);
  EXPECT_EQ(p.ranks[2].host, "node01");
  EXPECT_EQ(p.ranks[3].host, "node02");
  EXPECT_EQ(p.ranks[3].local_rank, 0);
  EXPECT_EQ(p.ranks[6].node_rank, 2);
  EXPECT_EQ(p.ranks[6].local_world_size, 2);
  EXPECT_EQ(p.master_addr, "node01");
  // 3 ranks on a 2-GPU node: they share, block-wise.
  EXPECT_EQ(p.ranks[0].gpus, std::vector<int>{0});
  EXPECT_EQ(p.ranks[2].gpus, std::vector<int>{1});
  EXPECT_EQ(p.ranks[4].gpus, std::vector<int>{1});
}

TEST(Plan, OneGpuPerRankFromLocalRankNotGlobalRank) {
  RankPlan p = make_plan(cluster({{"a", 4, 4}, {"b", 4, 4}}), {});
  for (const auto& r : p.ranks) EXPECT_EQ(r.gpus, std::vector<int>{r.local_rank});
}

TEST(Plan, GpusPerRank) {
  PlanOptions o;
  o.gpus_per_rank = 2;
  o.nproc_mode = NprocMode::count;
  o.nproc_per_node = 2;
  RankPlan p = make_plan(cluster({{"a", 4, 4}, {"b", 4, 4}}), o);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.ranks[1].gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(p.ranks[3].host, "b");
  o.nproc_per_node = 4;
  EXPECT_NE(error_of(cluster({{"a", 4, 4}}), o)
                .find("4 ranks x 2 GPUs per rank need 8 GPUs on node a, which has 4"),
            std::string::npos);
}

TEST(Plan, NtasksFillsNodesInOrderAndRefusesTooMany) {
  PlanOptions o;
  o.ntasks = 5;
  RankPlan p = make_plan(cluster({{"a", 4, 0}, {"b", 4, 0}, {"c", 4, 0}}), o);
  EXPECT_EQ(p.nodes.size(), 2u);
  EXPECT_EQ(p.ranks[4].host, "b");
  EXPECT_TRUE(p.ranks[4].gpus.empty());
  o.ntasks = 13;
  EXPECT_NE(
      error_of(cluster({{"a", 4, 0}, {"b", 4, 0}, {"c", 4, 0}}), o)
          .find("-n 13 asks for more ranks than the allocation's 12 slots (a: 4, b: 4, c: 4)"),
      std::string::npos);
}

TEST(Plan, NprocPerNodeGpu) {
  PlanOptions o;
  parse_nproc_per_node("gpu", o);
  RankPlan p = make_plan(cluster({{"a", 8, 2}, {"b", 8, 2}}), o);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_NE(error_of(cluster({{"a", 8, 0}}), o).find("no GPUs"), std::string::npos);
  PlanOptions bad;
  EXPECT_THROW(parse_nproc_per_node("0", bad), Error);
  EXPECT_THROW(parse_nproc_per_node("many", bad), Error);
  o.nproc_mode = NprocMode::count;
  o.nproc_per_node = 9;
  EXPECT_NE(error_of(cluster({{"a", 8, 2}}), o).find("only 8 task slots"), std::string::npos);
}

TEST(Plan, LocalMachineOversubscribesAndUsesLoopback) {
  DetectInput in;
  in.cpu_count = 2;
  in.device_gpu_count = 1;
  PlanOptions o;
  o.ntasks = 4;
  RankPlan p = make_plan(detect_allocation(in), o);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.master_addr, "127.0.0.1");
  EXPECT_EQ(p.ranks[3].gpus, std::vector<int>{0});  // four ranks share the one GPU
  EXPECT_EQ(p.cpus_per_rank, 1);
  RankPlan one = make_plan(detect_allocation(in), {});
  EXPECT_EQ(one.world_size, 1);  // one rank per GPU by default
}

TEST(Plan, StepTaskAcceptsOnlyMatchingNtasks) {
  Allocation a = detect_allocation(fixture("slurm.env"));
  PlanOptions o;
  o.ntasks = 8;
  EXPECT_EQ(make_plan(a, o).world_size, 8);
  o.ntasks = 4;
  EXPECT_NE(error_of(a, o).find("-n 4 but gpurun runs as one task of a srun step with 8 tasks"),
            std::string::npos);
}

TEST(Plan, MasterPortDerivedFromJobIdInRange) {
  int p1 = derive_master_port("slurm:123456"), p2 = derive_master_port("slurm:123457");
  EXPECT_NE(p1, p2);
  for (int i = 0; i < 1000; ++i) {
    int p = derive_master_port("job" + std::to_string(i));
    EXPECT_GE(p, 15000);
    EXPECT_LT(p, 32000);
  }
  EXPECT_EQ(make_plan(cluster({{"a", 1, 0}}), {}).master_port, derive_master_port("slurm:42"));
}

TEST(RankEnvironment, TorchrunContract) {
  RankPlan p = make_plan(cluster({{"a", 2, 2}, {"b", 2, 2}}), {});
  auto env = rank_environment(p, p.ranks[3], Scheduler::slurm, std::string("42"),
                              std::vector<std::string>{"GPU-x", "GPU-y"});
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m["RANK"], "3");
  EXPECT_EQ(m["WORLD_SIZE"], "4");
  EXPECT_EQ(m["LOCAL_RANK"], "1");
  EXPECT_EQ(m["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(m["NODE_RANK"], "1");
  EXPECT_EQ(m["MASTER_ADDR"], "a");
  EXPECT_EQ(m["CUDA_VISIBLE_DEVICES"], "GPU-y");
  EXPECT_EQ(m["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
  EXPECT_EQ(m["GPURUN_SCHEDULER"], "slurm");
  EXPECT_EQ(m["GPURUN_JOB_ID"], "42");
  EXPECT_THROW(rank_environment(p, p.ranks[3], Scheduler::slurm, {}, std::vector<std::string>{"0"}),
               Error);
}

// plan_test.cc: rank placement, GPU positions, master address/port, and the refusals that must
// happen before anything starts (with the numbers in the message).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

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
  // One task a node with two GPUs (torchrun's layout): the error says what to ask Slurm for.
  parse_nproc_per_node("gpu", o);
  EXPECT_NE(error_of(cluster({{"a", 1, 2}}), o)
                .find("only 1 task slots: ask Slurm for 2 tasks a node (#SBATCH "
                      "--ntasks-per-node=2"),
            std::string::npos)
      << error_of(cluster({{"a", 1, 2}}), o);
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

// TensorFlow's TF_CONFIG, byte for byte as its guide writes it: one worker per rank in rank order,
// each at its node and MASTER_PORT + 1 + its local rank; JAX's coordinator at MASTER_ADDR:PORT.
// (tests/launcher/contract_test.py parses them and checks every rank of real runs.)
TEST(RankEnvironment, TfAndJaxContracts) {
  PlanOptions o;
  o.master_port = 29500;
  RankPlan p = make_plan(cluster({{"a", 2, 2}, {"b", 2, 2}}), o);
  auto env = rank_environment(p, p.ranks[3], Scheduler::slurm, std::string("42"),
                              std::vector<std::string>{"GPU-x", "GPU-y"});
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m["TF_CONFIG"], R"({"cluster":{"worker":["a:29501","a:29502","b:29501","b:29502"]},)"
                            R"("task":{"type":"worker","index":3}})");
  EXPECT_EQ(m["JAX_COORDINATOR_ADDRESS"], "a:29500");
  EXPECT_EQ(m["JAX_LOCAL_DEVICE_IDS"], "0");
  // One node: every worker at MASTER_ADDR (127.0.0.1 on a bare machine, as torch gets).
  Allocation one = cluster({{"h", 2, 0}});
  one.scheduler = Scheduler::local;
  o.ntasks = 2;
  p = make_plan(one, o);
  m.clear();
  for (auto& kv : rank_environment(p, p.ranks[0], Scheduler::local, {}, std::nullopt)) m.insert(kv);
  EXPECT_EQ(m["TF_CONFIG"], R"({"cluster":{"worker":["127.0.0.1:29501","127.0.0.1:29502"]},)"
                            R"("task":{"type":"worker","index":0}})");
  EXPECT_EQ(m.count("JAX_LOCAL_DEVICE_IDS"), 0u);  // no GPU: JAX's own default
  p.master_addr = "fe80::1";  // --master-addr: an IPv6 literal goes in brackets
  m.clear();
  for (auto& kv : rank_environment(p, p.ranks[0], Scheduler::local, {}, std::nullopt)) m.insert(kv);
  EXPECT_EQ(m["JAX_COORDINATOR_ADDRESS"], "[fe80::1]:29500");
  EXPECT_NE(m["TF_CONFIG"].find(R"("[fe80::1]:29502")"), std::string::npos);
}

// --contract sets exactly its frameworks' variables; the rank numbers come with every one.
TEST(RankEnvironment, ContractChoosesTheVariables) {
  for (const auto& [value, want] : std::vector<std::pair<std::string, std::string>>{
           {"torch", "GROUP_RANK MASTER_ADDR MASTER_PORT"},
           {"tf", "TF_CONFIG"},
           {"jax", "JAX_COORDINATOR_ADDRESS JAX_LOCAL_DEVICE_IDS"},
           {"torch,tf,jax",
            "GROUP_RANK MASTER_ADDR MASTER_PORT TF_CONFIG "
            "JAX_COORDINATOR_ADDRESS JAX_LOCAL_DEVICE_IDS"}}) {
    PlanOptions o;
    o.contracts = parse_contracts(value);
    RankPlan p = make_plan(cluster({{"a", 2, 2}}), o);
    std::string got;
    for (const auto& [k, v] :
         rank_environment(p, p.ranks[1], Scheduler::slurm, {}, std::vector<std::string>{"0", "1"}))
      if (k != "RANK" && k != "WORLD_SIZE" && k != "LOCAL_RANK" && k != "LOCAL_WORLD_SIZE" &&
          k != "NODE_RANK" && k.rfind("CUDA_", 0) != 0 && k.rfind("GPURUN_", 0) != 0 &&
          k != "OMP_NUM_THREADS")
        got += (got.empty() ? "" : " ") + k;
    EXPECT_EQ(got, want) << "--contract " << value;
  }
}

TEST(Plan, ContractRefusals) {
  for (const auto& [value, want] : std::vector<std::pair<std::string, std::string>>{
           {"pytorch",
            "--contract 'pytorch': unknown contract 'pytorch'; expected a comma-separated "
            "list of torch, tf and jax"},
           {"", "--contract '': an empty name"},
           {"torch,,jax", "an empty name"},
           {"tf,torch,tf", "'tf' twice"}}) {
    try {
      parse_contracts(value);
      ADD_FAILURE() << "accepted --contract " << value;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  // TF_CONFIG's ports sit above MASTER_PORT: a port at the top leaves them no room.
  PlanOptions o;
  o.master_port = 65534;
  EXPECT_NE(error_of(cluster({{"a", 2, 2}}), o)
                .find("--master-port 65534 leaves no room for "
                      "TF_CONFIG's worker ports"),
            std::string::npos);
  o.contracts.tf = false;
  EXPECT_EQ(error_of(cluster({{"a", 2, 2}}), o), "");
}

// --nnodes N or MIN:MAX: counts from 1, MIN <= MAX; anything else is refused by name.
TEST(Plan, NnodesParsesAndRefuses) {
  NodeRange r = parse_nnodes("1:2");
  EXPECT_EQ(r.min, 1);
  EXPECT_EQ(r.max, 2);
  r = parse_nnodes("3");
  EXPECT_EQ(r.min, 3);
  EXPECT_EQ(r.max, 3);
  const auto error = [](const std::string& text) {
    try {
      parse_nnodes(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  for (const char* bad : {"", ":", "0:2", "2:1", "1:", ":2", "a", "1:2:3", "-1:2", "1.5"})
    EXPECT_EQ(error(bad).rfind(std::string("--nnodes '") + bad + "': ", 0), 0u) << error(bad);
  EXPECT_EQ(error("2:1"), "--nnodes '2:1': MAX (1) is below MIN (2)");
  EXPECT_EQ(error("0"), "--nnodes '0': MIN must be at least 1 node");
}

// MAX caps the nodes used (the first MAX, in the allocation's order); fewer than MIN nodes in the
// allocation, or -n with a world size that must follow the nodes, are refused before any start.
TEST(Plan, NnodesCapsAndRefuses) {
  const Allocation a = cluster({{"n1", 2, 2}, {"n2", 2, 2}, {"n3", 2, 2}});
  PlanOptions o;
  o.nnodes = NodeRange{1, 2};
  RankPlan p = make_plan(a, o);
  ASSERT_EQ(p.nodes.size(), 2u);
  EXPECT_EQ(p.nodes[1].host, "n2");
  EXPECT_EQ(p.world_size, 4);
  o.nnodes = NodeRange{1, 5};
  EXPECT_EQ(make_plan(a, o).world_size, 6) << "MAX above the allocation: every node";
  o.nnodes = NodeRange{4, 4};
  EXPECT_EQ(
      error_of(a, o),
      "--nnodes 4 needs at least 4 nodes, but the Slurm allocation has 3 (n1: 2, n2: 2, n3: 2)");
  o.nnodes = NodeRange{1, 2};
  o.ntasks = 2;
  EXPECT_NE(error_of(a, o).find("-n 2 with --nnodes 1:2: the world size follows the nodes"),
            std::string::npos)
      << error_of(a, o);
  o.nnodes = NodeRange{2, 2};
  EXPECT_EQ(make_plan(a, o).world_size, 2) << "-n with a fixed node count is fine";
}

// A node left out by --nnodes: srun is told --exclude, so the step cannot land there.
TEST(Plan, SrunExcludesTheNodesLeftOut) {
  const Allocation a = cluster({{"node1", 2, 2}, {"node3", 2, 2}});
  LaunchOptions o;
  o.launcher = "srun";
  o.program = {"prog"};
  o.find_tool = [](const std::string& t) { return std::optional<std::string>("/usr/bin/" + t); };
  o.exclude_hosts = {"node2", "node4"};
  const LaunchCommand c = build_launch(a, make_plan(a, {}), o);
  EXPECT_NE(std::find(c.argv.begin(), c.argv.end(), "--exclude=node[2,4]"), c.argv.end());
  EXPECT_NE(std::find(c.argv.begin(), c.argv.end(), "--nodelist=node[1,3]"), c.argv.end());
  o.exclude_hosts.clear();
  const LaunchCommand d = build_launch(a, make_plan(a, {}), o);
  for (const auto& w : d.argv) EXPECT_EQ(w.rfind("--exclude", 0), std::string::npos) << w;
}

// A rank started by gpurun's srun in a --gpus-per-task=1 job: slurmstepd bound the task to one of
// its node's 2 GPUs (SLURMD_TRES_BIND=gpu:per_task:1, CUDA_VISIBLE_DEVICES=1 for local rank 1).
// That GPU is the rank's; indexing the node's list at position 1 failed with "the nodes of this
// job differ in GPU count". Without the binding mark, a short list is still refused.
TEST(RankEnvironment, SrunBoundTaskGetsItsOwnGpu) {
  const Env bound{{"SLURMD_TRES_BIND", "gpu:per_task:1"}};
  EXPECT_TRUE(srun_bound_task_gpus(bound, 1, 2));
  EXPECT_FALSE(srun_bound_task_gpus(bound, 2, 2)) << "it sees the whole node";
  EXPECT_FALSE(srun_bound_task_gpus(bound, 0, 2)) << "it sees no GPU at all";
  EXPECT_FALSE(srun_bound_task_gpus({{"SLURMD_TRES_BIND", "gpu:none"}}, 1, 2));
  EXPECT_FALSE(srun_bound_task_gpus({}, 1, 2));
  EXPECT_TRUE(srun_bound_task_gpus({{"SLURMD_TRES_BIND", "gpu:map_gpu:1,0"}}, 1, 2));

  const Allocation a = cluster({{"node1", 2, 2}, {"node2", 2, 2}});
  const RankPlan p = make_plan(a, {});
  RankEntry r = p.ranks[1];
  ASSERT_EQ(r.gpus, (std::vector<int>{1}));
  const std::vector<std::string> visible{"1"};
  try {
    rank_environment(p, r, a.scheduler, a.job_id, visible);
    ADD_FAILURE() << "position 1 of a one-GPU list was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lists only 1 GPU where gpurun planned 2"),
              std::string::npos)
        << e.what();
  }
  r.gpus = task_gpu_share(visible.size());
  std::map<std::string, std::string> env;
  for (auto& [k, v] : rank_environment(p, r, a.scheduler, a.job_id, visible)) env[k] = v;
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(env["JAX_LOCAL_DEVICE_IDS"], "0");
}

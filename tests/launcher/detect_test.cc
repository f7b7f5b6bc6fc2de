// detect_test.cc: allocation detection for every scheduler from injected environments: the shared
// fixtures (real variable names and formats) plus cases from the schedulers' documentation, and
// the contradictions that must be refused with the variable named.
#include <gtest/gtest.h>

#include <map>

#include "alloc/detect_internal.h"
#include "alloc/env_util.h"
#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/error.h"
#include "test_support.h"

using namespace gpurun::launcher;
using fixtures::fixture;

namespace {

std::string error_of(const DetectInput& in, std::optional<Scheduler> s = {}) {
  try {
    detect_allocation(in, s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DetectSlurm, InsideSrunStepStepValuesWin) {
  Allocation a = detect_allocation(fixture("slurm.env"));
  EXPECT_EQ(a.scheduler, Scheduler::slurm);
  EXPECT_EQ(a.job_id, "123456");
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].host, "gpu001");
  EXPECT_EQ(a.nodes[1].host, "gpu002");
  EXPECT_EQ(a.nodes[0].slots, 4);
  EXPECT_EQ(a.nodes[1].gpus, 4);
  // The trap: SLURM_STEP_GPUS=4,5,6,7 are global ids, CUDA sees 0,1,2,3 in the cgroup.
  EXPECT_EQ(a.local_gpu_ids, (std::vector<std::string>{"0", "1", "2", "3"}));
  ASSERT_TRUE(a.step_task);
  EXPECT_EQ(a.step_task->rank, 5);
  EXPECT_EQ(a.step_task->local_rank, 1);
  EXPECT_EQ(a.step_task->node_rank, 1);
  EXPECT_EQ(a.step_task->world_size, 8);
  EXPECT_EQ(a.end_time, 1767312000);
  EXPECT_EQ(a.this_host, "gpu002");
}

TEST(DetectSlurm, BatchStepUnevenTasks) {
  Allocation a = detect_allocation(fixture("slurm_batch.env"));
  EXPECT_FALSE(a.step_task);
  ASSERT_EQ(a.nodes.size(), 3u);
  EXPECT_EQ(a.nodes[0].slots, 3);
  EXPECT_EQ(a.nodes[2].slots, 2);
  EXPECT_EQ(a.total_slots(), 7);
  EXPECT_EQ(a.nodes[1].gpus, 2);
  EXPECT_EQ(a.cpus_per_task, 2);  // 6 CPUs on node01 shared by its 3 tasks
}

TEST(DetectSlurm, StepIdOfBatchIsNotAStep) {
  auto in = fixture("slurm_batch.env");
  in.env["SLURM_STEP_ID"] = "4294967291";
  EXPECT_FALSE(detect_allocation(in).step_task);
}

TEST(DetectSlurm, ContradictionsNameTheVariable) {
  auto in = fixture("slurm_batch.env");
  in.env["SLURM_NTASKS"] = "8";
  EXPECT_NE(error_of(in).find("SLURM_NTASKS=8"), std::string::npos) << error_of(in);
  in = fixture("slurm_batch.env");
  in.env["SLURM_TASKS_PER_NODE"] = "3,2";
  EXPECT_NE(error_of(in).find("SLURM_TASKS_PER_NODE=3,2 describes 2 nodes"), std::string::npos)
      << error_of(in);
  in = fixture("slurm_batch.env");
  in.env["SLURM_JOB_NUM_NODES"] = "4";
  EXPECT_NE(error_of(in).find("SLURM_JOB_NUM_NODES=4"), std::string::npos);
  in = fixture("slurm_batch.env");
  in.env["SLURM_JOB_NODELIST"] = "node[01-";
  EXPECT_NE(error_of(in).find("SLURM_JOB_NODELIST=node[01-"), std::string::npos);
  in = fixture("slurm_batch.env");
  in.env["SLURM_JOB_END_TIME"] = "soon";
  EXPECT_NE(error_of(in).find("SLURM_JOB_END_TIME"), std::string::npos);
  in = fixture("slurm.env");
  in.env["SLURM_PROCID"] = "8";
  EXPECT_NE(error_of(in).find("SLURM_PROCID=8"), std::string::npos);
}

TEST(DetectSlurm, GpusPerTaskBinding) {
  // srun --gpus-per-task=1: the task sees one GPU while the node has four.
  auto in = fixture("slurm.env");
  in.env["CUDA_VISIBLE_DEVICES"] = "1";
  Allocation a = detect_allocation(in);
  EXPECT_EQ(a.local_gpu_ids, (std::vector<std::string>{"1"}));
  EXPECT_EQ(a.nodes[0].gpus, 4);
}

// In the batch script, a CUDA_VISIBLE_DEVICES narrower than SLURM_GPUS_ON_NODE (the user chose
// some GPUs) is what the ranks get: planning the node's count made the launch fail with "the
// nodes of this job differ in GPU count".
TEST(DetectSlurm, BatchScriptNarrowedVisibleDevicesWin) {
  auto in = fixture("slurm_batch.env");
  in.env["SLURM_GPUS_ON_NODE"] = "4";
  in.env["SLURM_JOB_GPUS"] = "0,1,2,3";
  in.env["CUDA_VISIBLE_DEVICES"] = "MIG-aaaa,MIG-bbbb";
  Allocation a = detect_allocation(in);
  EXPECT_EQ(a.local_gpu_ids, (std::vector<std::string>{"MIG-aaaa", "MIG-bbbb"}));
  for (const auto& n : a.nodes) EXPECT_EQ(n.gpus, 2) << n.host;
  bool noted = false;
  for (const auto& n : a.notes)
    noted |= n.find("lists 2 of the node's 4 GPUs") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(DetectSlurm, GpusFromStepIdsWhenNoCudaVisibleDevices) {
  auto in = fixture("slurm.env");
  in.env.erase("CUDA_VISIBLE_DEVICES");
  Allocation a = detect_allocation(in);
  EXPECT_EQ(a.local_gpu_ids, (std::vector<std::string>{"4", "5", "6", "7"}));
}

TEST(DetectPbs, ProNodefileAndUuids) {
  Allocation a = detect_allocation(fixture("pbspro.env"));
  EXPECT_EQ(a.scheduler, Scheduler::pbs);
  EXPECT_EQ(a.flavor, "PBS Pro");
  EXPECT_EQ(a.job_id, "4242.pbs01");
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].host, "gn001");
  EXPECT_EQ(a.nodes[0].slots, 4);
  EXPECT_EQ(a.nodes[1].gpus, 4);
  ASSERT_EQ(a.local_gpu_ids.size(), 4u);
  EXPECT_EQ(a.local_gpu_ids[0].rfind("GPU-", 0), 0u);
  EXPECT_EQ(a.cpus_per_task, 2);  // NCPUS=8 shared by mpiprocs=4
}

TEST(DetectPbs, TorqueGpufileAndCounts) {
  Allocation a = detect_allocation(fixture("torque.env"));
  EXPECT_EQ(a.flavor, "Torque");
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[1].host, "tq02");
  EXPECT_EQ(a.nodes[1].slots, 2);
  EXPECT_EQ(a.nodes[1].gpus, 2);
  auto in = fixture("torque.env");
  in.env["PBS_NP"] = "6";
  EXPECT_NE(error_of(in).find("PBS_NP=6"), std::string::npos);
  in = fixture("torque.env");
  in.env["PBS_NUM_NODES"] = "3";
  EXPECT_NE(error_of(in).find("PBS_NUM_NODES=3"), std::string::npos);
}

// A node file whose hosts alternate: the nodes in order of first appearance, and the fact that
// line order is not node order (pbsdsh numbers its tasks by line, build_launch refuses it).
TEST(DetectPbs, InterleavedNodefileIsNoticed) {
  auto in = fixture("pbspro.env");
  in.read_file = [](const std::string&) -> std::optional<std::string> {
    return "gn1\ngn2\ngn1\ngn2\n";
  };
  Allocation a = detect_allocation(in);
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].slots, 2);
  EXPECT_TRUE(a.host_file_interleaved);
  in.read_file = [](const std::string&) -> std::optional<std::string> {
    return "gn1\ngn1\ngn2\ngn2\n";
  };
  EXPECT_FALSE(detect_allocation(in).host_file_interleaved);
}

TEST(DetectPbs, MissingOrEmptyNodefile) {
  auto in = fixture("pbspro.env");
  in.env["PBS_NODEFILE"] = "/nonexistent/nodefile";
  EXPECT_NE(error_of(in).find("PBS_NODEFILE=/nonexistent/nodefile"), std::string::npos);
  in = fixture("pbspro.env", {{"/var/spool/pbs/aux/4242.pbs01", "/dev/null"}});
  EXPECT_NE(error_of(in).find("empty"), std::string::npos) << error_of(in);
  in.env.erase("PBS_NODEFILE");
  EXPECT_NE(error_of(in).find("PBS_NODEFILE is not set"), std::string::npos);
}

TEST(DetectLsf, HostfileOrderAndCheck) {
  Allocation a = detect_allocation(fixture("lsf.env"));
  EXPECT_EQ(a.scheduler, Scheduler::lsf);
  EXPECT_EQ(a.job_id, "314159");
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].host, "hosta");
  EXPECT_EQ(a.nodes[0].slots, 4);
  EXPECT_EQ(a.nodes[1].gpus, 4);
  auto in = fixture("lsf.env");
  in.env["LSB_MCPU_HOSTS"] = "hosta 4 hostb 2";
  EXPECT_NE(error_of(in).find("disagree"), std::string::npos);
  in = fixture("lsf.env");
  in.env["LSB_DJOB_HOSTFILE"] = "/nonexistent";
  EXPECT_NE(error_of(in).find("LSB_DJOB_HOSTFILE=/nonexistent"), std::string::npos);
}

TEST(DetectLsf, McpuOrderNotLsbHosts) {
  // A real dump: LSB_HOSTS order differs from LSB_MCPU_HOSTS; the latter is used.
  DetectInput in;
  in.env = {{"LSB_JOBID", "1"},
            {"LSB_HOSTS", "grid01 grid01 grid05 grid03"},
            {"LSB_MCPU_HOSTS", "grid03 1 grid05 1 grid01 2"}};
  Allocation a = detect_allocation(in);
  ASSERT_EQ(a.nodes.size(), 3u);
  EXPECT_EQ(a.nodes[0].host, "grid03");
  EXPECT_EQ(a.nodes[2].slots, 2);
}

TEST(DetectLsf, SummitLaunchNodeGetsNoRanks) {
  Allocation a = detect_allocation(fixture("summit.env"));
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].host, "a01n01");
  EXPECT_EQ(a.nodes[0].slots, 42);
  EXPECT_EQ(a.nodes[0].gpus, 6);
  EXPECT_FALSE(a.notes.empty());
}

TEST(DetectLsf, JsrunTask) {
  auto in = fixture("summit.env");
  in.env["JSM_NAMESPACE_RANK"] = "7";
  in.env["JSM_NAMESPACE_SIZE"] = "12";
  in.env["JSM_NAMESPACE_LOCAL_RANK"] = "1";
  in.env["JSM_NAMESPACE_LOCAL_SIZE"] = "6";
  Allocation a = detect_allocation(in);
  ASSERT_TRUE(a.step_task);
  EXPECT_EQ(a.step_task->rank, 7);
  EXPECT_EQ(a.step_task->node_rank, 1);
}

TEST(DetectGpuq, RealIds) {
  Allocation a = detect_allocation(fixture("gpuq.env"));
  EXPECT_EQ(a.scheduler, Scheduler::gpuq);
  EXPECT_EQ(a.job_id, "17");
  EXPECT_EQ(a.local_gpu_ids, (std::vector<std::string>{"2", "3"}));
  EXPECT_EQ(a.nodes[0].gpus, 2);
  auto in = fixture("gpuq.env");
  in.env["CUDA_VISIBLE_DEVICES"] = "2";
  EXPECT_NE(error_of(in).find("GPUQ_GPUS=2,3"), std::string::npos);
}

TEST(DetectLocal, VisibleDevicesOrDeviceCount) {
  DetectInput in;
  in.hostname = "box";
  in.cpu_count = 16;
  in.device_gpu_count = 3;
  Allocation a = detect_allocation(in);
  EXPECT_EQ(a.scheduler, Scheduler::local);
  EXPECT_EQ(a.nodes[0].gpus, 3);
  in.env["CUDA_VISIBLE_DEVICES"] = "";
  EXPECT_EQ(detect_allocation(in).nodes[0].gpus, 0);
  in.env["CUDA_VISIBLE_DEVICES"] = "GPU-aaa,MIG-bbb";
  EXPECT_EQ(detect_allocation(in).local_gpu_ids, (std::vector<std::string>{"GPU-aaa", "MIG-bbb"}));
  in.env["CUDA_VISIBLE_DEVICES"] = "0,,1";
  EXPECT_THROW(detect_allocation(in), Error);
}

TEST(Detect, SniffOrderAndForcing) {
  EXPECT_EQ(sniff_scheduler({{"PBS_JOBID", "1"}, {"SLURM_JOB_ID", "2"}}), Scheduler::slurm);
  EXPECT_EQ(sniff_scheduler({{"GPUQ_JOB_ID", "1"}}), Scheduler::gpuq);
  // A gpuq job sets Slurm's variables for cluster scripts (SLURM_JOB_ID is its gpuq id): gpuq
  // still; salloc inside it gives another SLURM_JOB_ID: Slurm from then on.
  EXPECT_EQ(sniff_scheduler({{"GPUQ_JOB_ID", "7"}, {"SLURM_JOB_ID", "7"}, {"SLURM_JOBID", "7"}}),
            Scheduler::gpuq);
  EXPECT_EQ(sniff_scheduler({{"GPUQ_JOB_ID", "7"}, {"SLURM_JOB_ID", "4012"}}), Scheduler::slurm);
  EXPECT_EQ(sniff_scheduler({}), Scheduler::local);
  EXPECT_NE(error_of(DetectInput{}, Scheduler::slurm).find("SLURM_JOB_ID is not set"),
            std::string::npos);
}

// --env-file reads real dumps: env's multi-line values (Lmod's BASH_FUNC_module%%), export -p
// and declare -px quoting; what is none of these is refused naming the line.
TEST(EnvFile, ReadsEnvExportAndDeclareDumps) {
  using gpurun::launcher::detail::parse_env_text;
  Env e = parse_env_text(
      "SLURM_JOB_ID=42\n"
      "BASH_FUNC_module%%=() {  local __lmod_sh_dbg;\n"
      " eval \"$($LMOD_CMD shell \"$@\")\"\n"
      "}\n"
      "EMPTY=\n"
      "URL=a=b\n"
      "BASH_FUNC_ml%%=() {  eval \"$($LMOD_DIR/ml_cmd \"$@\")\";\n"
      " __lmod_sh_dbg='vx';\n"
      "}\n",
      "env");
  EXPECT_EQ(e["SLURM_JOB_ID"], "42");
  EXPECT_EQ(e["BASH_FUNC_module%%"],
            "() {  local __lmod_sh_dbg;\n eval \"$($LMOD_CMD shell \"$@\")\"\n}");
  EXPECT_EQ(e["EMPTY"], "");
  EXPECT_EQ(e["URL"], "a=b");
  EXPECT_EQ(e["BASH_FUNC_ml%%"],
            "() {  eval \"$($LMOD_DIR/ml_cmd \"$@\")\";\n __lmod_sh_dbg='vx';\n}")
      << "an indented NAME=... line is the function's body, not a variable";
  EXPECT_EQ(e.count("__lmod_sh_dbg"), 0u);
  Env x = parse_env_text(
      "declare -x SLURM_TASKS_PER_NODE=\"2(x2)\"\n"
      "export PS1='$ '\n"
      "declare -x MSG=\"say \\\"hi\\\" \\$HOME\"\n"
      "export TWO=\"line 1\nline 2\"\n"
      "export PLAIN=x\n"
      "declare -rx TMOUT=\"900\"\n"
      "declare -x OLDPWD\n",
      "export -p");
  EXPECT_EQ(x["SLURM_TASKS_PER_NODE"], "2(x2)");
  EXPECT_EQ(x["PS1"], "$ ");
  EXPECT_EQ(x["MSG"], "say \"hi\" $HOME");
  EXPECT_EQ(x["TWO"], "line 1\nline 2");
  EXPECT_EQ(x["PLAIN"], "x");
  EXPECT_EQ(x["TMOUT"], "900") << "declare -rx: readonly and exported";
  EXPECT_EQ(x.count("OLDPWD"), 0u) << "exported but unset: not in the environment";
  auto error = [](const std::string& text) {
    try {
      parse_env_text(text, "f");
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string();
  };
  EXPECT_EQ(error("not a variable\n"), "f:1: expected NAME=VALUE, got 'not a variable'");
  EXPECT_EQ(error("export 1X=2\n"), "f:1: expected NAME=VALUE, got 'export 1X=2'");
  EXPECT_EQ(error("export A=\"open\n"), "f: the quoted value of A is not closed");
}

// Issue 26, item 5: zero or negative slots are refused by name (they made a plan of no rank, and
// nodes.front() on it crashed gpurun with SIGSEGV in info, --dry-run and a run).
TEST(DetectBounds, ZeroSlotsNameTheVariable) {
  for (const char* tpn : {"0", "0(x2)", "2,0", "70000"}) {
    DetectInput in;
    in.env = {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
    in.env["SLURM_TASKS_PER_NODE"] = tpn;
    if (std::string(tpn) == "0") in.env["SLURM_JOB_NODELIST"] = "n1";
    if (std::string(tpn) == "70000") in.env["SLURM_JOB_NODELIST"] = "n1";
    EXPECT_NE(error_of(in).find(std::string("SLURM_TASKS_PER_NODE=") + tpn), std::string::npos)
        << tpn << ": " << error_of(in);
  }
  DetectInput lsf;
  lsf.env = {{"LSB_JOBID", "1"}, {"LSB_MCPU_HOSTS", "h1 0"}};
  EXPECT_NE(error_of(lsf).find("LSB_MCPU_HOSTS: node h1 has 0 task slots"), std::string::npos)
      << error_of(lsf);
  lsf.env["LSB_MCPU_HOSTS"] = "h1 4 h2 99999999999";
  EXPECT_NE(error_of(lsf).find("LSB_MCPU_HOSTS: node h2 has 99999999999"), std::string::npos);
}

// Host files hold one host name a line: a binary file, a control character or an overlong name
// is refused with the file and the line named, the offending text escaped.
TEST(DetectBounds, HostFileLinesAreHostNames) {
  auto with_nodefile = [](std::string text) {
    auto in = fixture("pbspro.env");
    in.read_file = [text](const std::string&) -> std::optional<std::string> { return text; };
    return in;
  };
  std::string e =
      error_of(with_nodefile(std::string("gn1\n\x7f"
                                         "ELF\x02\x01\0\0\0",
                                         12)));
  EXPECT_NE(e.find("PBS_NODEFILE=/var/spool/pbs/aux/4242.pbs01:2: '\\x7fELF\\x02\\x01\\0"),
            std::string::npos)
      << e;
  e = error_of(with_nodefile("gn1\ngn\x1b[2Kx\n"));
  EXPECT_NE(e.find(":2: 'gn\\e[2Kx' holds a control character"), std::string::npos) << e;
  e = error_of(with_nodefile("gn1\n\n" + std::string(300, 'a') + "\n"));
  EXPECT_NE(e.find(":3: 'aaaa"), std::string::npos) << e;
  EXPECT_NE(e.find("is not a host name: expected 1 to 255"), std::string::npos) << e;
  e = error_of(with_nodefile("gn1\ngn/2\n"));
  EXPECT_NE(e.find(":2: 'gn/2' is not a host name"), std::string::npos) << e;
  // Torque's "host:ppn=N" and extra columns name the host first.
  Allocation a = detect_allocation(with_nodefile("gn1:ppn=2 x\ngn1\ngn2 extra\n"));
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].host, "gn1");
  EXPECT_EQ(a.nodes[0].slots, 2);
}

TEST(DetectBounds, GpuFileLinesChecked) {
  auto in = fixture("torque.env");
  auto read = in.read_file;
  in.read_file = [read](const std::string& p) -> std::optional<std::string> {
    if (p.find("gpufile") != std::string::npos) return std::string("n1-gpu0\nn\x1b-gpu1\n");
    return read(p);
  };
  std::string e = error_of(in);
  EXPECT_NE(e.find("PBS_GPUFILE="), std::string::npos) << e;
  EXPECT_NE(e.find(":2: 'n\\e-gpu1' is not '<host>-gpu<index>'"), std::string::npos) << e;
}

// A reader that refuses a file (a folder, a device, too large) is named with the variable.
TEST(DetectBounds, RefusedFileNamesTheVariable) {
  auto in = fixture("lsf.env");
  in.read_file = [](const std::string&) -> std::optional<std::string> {
    throw Error("is a device or a socket, not a file");
  };
  EXPECT_NE(error_of(in).find("LSB_DJOB_HOSTFILE="), std::string::npos) << error_of(in);
  EXPECT_NE(error_of(in).find(": is a device or a socket, not a file"), std::string::npos);
}

// Issue 25, item 3: --requeue in an array task names the task (the first task's SLURM_JOB_ID is
// the array's, which scontrol takes for all of it).
TEST(DetectSlurm, ArrayTaskIsNamedForRequeue) {
  DetectInput in;
  in.env = {{"SLURM_JOB_ID", "41"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_TASKS_PER_NODE", "1"}};
  EXPECT_FALSE(detect_allocation(in).array_task);
  in.env["SLURM_ARRAY_JOB_ID"] = "41";
  in.env["SLURM_ARRAY_TASK_ID"] = "3";
  EXPECT_EQ(detect_allocation(in).array_task, "41_3");
  in.env["SLURM_ARRAY_TASK_ID"] = "3;rm";
  EXPECT_NE(error_of(in).find("SLURM_ARRAY_TASK_ID='3;rm'"), std::string::npos) << error_of(in);
  DetectInput lsf;
  lsf.env = {{"LSB_JOBID", "77"}, {"LSB_HOSTS", "h1"}, {"LSB_JOBINDEX", "0"}};
  EXPECT_FALSE(detect_allocation(lsf).array_task);
  lsf.env["LSB_JOBINDEX"] = "5";
  EXPECT_EQ(detect_allocation(lsf).array_task, "77[5]");
}

// The same for gpuq, whose `gpuq requeue` takes N_T as scancel and scontrol do: the first task's
// GPUQ_JOB_ID is the array's id, which names every task.
TEST(DetectGpuq, ArrayTaskIsNamedForRequeue) {
  auto in = fixture("gpuq.env");
  EXPECT_FALSE(detect_allocation(in).array_task);
  in.env["GPUQ_ARRAY_JOB_ID"] = "17";
  in.env["GPUQ_ARRAY_TASK_ID"] = "0";
  EXPECT_EQ(detect_allocation(in).array_task, "17_0");
  in.env["GPUQ_ARRAY_TASK_ID"] = "0 17";
  EXPECT_NE(error_of(in).find("GPUQ_ARRAY_TASK_ID='0 17'"), std::string::npos) << error_of(in);
}

namespace {

// The salloc shell of `salloc -N2 --ntasks-per-node=2 --gres=gpu:2` (Slurm 22.05): no GPU
// variable at all, and `scontrol -d show job` (fixture text below) knows each node's GPUs.
DetectInput salloc_shell(const std::string& scontrol_text) {
  DetectInput in;
  in.env = {{"SLURM_JOB_ID", "6"},        {"SLURM_JOB_NODELIST", "node[1-3]"},
            {"SLURM_JOB_NUM_NODES", "3"}, {"SLURM_TASKS_PER_NODE", "2(x3)"},
            {"SLURM_NTASKS", "6"},        {"SLURM_JOB_CPUS_PER_NODE", "2(x3)"}};
  in.slurm_job_details = [scontrol_text](const std::string& id) -> std::optional<std::string> {
    if (id != "6") return std::nullopt;
    return scontrol_text;
  };
  return in;
}

constexpr const char* kShowJob =
    "JobId=6 JobName=interactive\n"
    "   NodeList=node[1-3]\n"
    "   JOB_GRES=gpu:5\n"
    "     Nodes=node[1-2] CPU_IDs=2-3 Mem=0 GRES=gpu:2(IDX:0-1)\n"
    "     Nodes=node3 CPU_IDs=0-1 Mem=0 GRES=gpu:a100:1(IDX:3),nic:1(IDX:0)\n"
    "   MinCPUsNode=2 MinMemoryNode=0 MinTmpDiskNode=0\n";

}  // namespace

// Every rank got CUDA_VISIBLE_DEVICES="" under salloc: the shell has no SLURM_JOB_GPUS,
// SLURM_GPUS_ON_NODE or CUDA_VISIBLE_DEVICES, so the plan had no GPUs.
TEST(DetectSlurm, SallocShellGpusFromScontrol) {
  Allocation a = detect_allocation(salloc_shell(kShowJob));
  ASSERT_EQ(a.nodes.size(), 3u);
  EXPECT_EQ(a.nodes[0].gpus, 2);
  EXPECT_EQ(a.nodes[1].gpus, 2);
  EXPECT_EQ(a.nodes[2].gpus, 1) << "a typed GPU counts, a NIC does not";
  EXPECT_TRUE(a.local_gpu_ids.empty()) << "the shell's machine is no node of the job";
  bool noted = false;
  for (const auto& n : a.notes) noted |= n.find("scontrol -d show job 6") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(DetectSlurm, SallocShellScontrolOnlyWithoutGpuVariables) {
  auto in = salloc_shell(kShowJob);
  in.env["SLURM_GPUS_ON_NODE"] = "1";
  in.env["SLURM_JOB_GPUS"] = "0";
  EXPECT_EQ(detect_allocation(in).nodes[0].gpus, 1) << "the variable wins";
  in = salloc_shell(kShowJob);
  in.slurm_job_details = nullptr;  // no scontrol: as before
  EXPECT_EQ(detect_allocation(in).nodes[0].gpus, 0);
  in = salloc_shell("JobId=6\n     Nodes=node[1-3] CPU_IDs=0-1 Mem=0 GRES=\n");
  EXPECT_EQ(detect_allocation(in).nodes[0].gpus, 0);
  // A GRES form not read here leaves the job as it was without scontrol, with a note: it used
  // to stop gpurun in the salloc shell.
  in = salloc_shell("JobId=6\n     Nodes=node[1-3] CPU_IDs=0-1 Mem=0 GRES=gpu:many\n");
  Allocation odd = detect_allocation(in);
  EXPECT_EQ(odd.nodes[0].gpus, 0);
  bool noted = false;
  for (const auto& n : odd.notes)
    noted |= n.find("could not be read from scontrol") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(DetectSlurm, ScontrolGresIndexLists) {
  using gpurun::launcher::detail::slurm_job_gpus;
  auto g = slurm_job_gpus(
      "  Nodes=n[1-2] CPU_IDs=0 Mem=0 GRES=gpu:3(IDX:0,2-3)\n"
      "  Nodes=n3 CPU_IDs=0 Mem=0 GRES=gpu:v100:1(IDX:1),gpu:a100:2(IDX:4-5)\n");
  EXPECT_EQ(g, (std::map<std::string, int>{{"n1", 3}, {"n2", 3}, {"n3", 3}}));
  // Slurm's form for GPUs it has no indices for (a code review; it was "has no GPU count").
  EXPECT_EQ(slurm_job_gpus("  Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu(CNT:2)\n"
                           "  Nodes=n2 CPU_IDs=0 Mem=0 GRES=gpu:a100(CNT:4)\n"),
            (std::map<std::string, int>{{"n1", 2}, {"n2", 4}}));
  try {
    slurm_job_gpus("  Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0)\n");
    ADD_FAILURE() << "a count that disagrees with its IDX was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scontrol -d show job: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("counts 2 GPUs but its IDX lists 1"), std::string::npos)
        << e.what();
  }
}

// gpu_sampler_test.cc: the GPU sampler against fake nvidia-smi scripts (fixtures/nvidia-smi: the
// real CSV shapes, with [N/A], [Not Supported], a MIG listing and a GPU that vanishes mid-job),
// the one-line snapshot encoding, and per-process CPU time and memory from /proc and cgroup files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gpurun/common/error.h"
#include "gpurun/gpuinfo/gpu_sampler.h"
#include "gpurun/gpuinfo/proc_usage.h"

using gpurun::common::Error;
namespace gpuinfo = gpurun::gpuinfo;

namespace {

std::string fixture(const std::string& name) {
  return std::string(GPURUN_FIXTURES) + "/nvidia-smi/" + name;
}

gpuinfo::GpuSnapshot sample_with(const std::string& script) {
  gpuinfo::GpuSampler s(gpuinfo::SamplerConfig{fixture(script)});
  return s.sample();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct TempDir {
  std::string path;
  TempDir() {
    char tpl[] = "/tmp/gpu-sampler-test-XXXXXX";
    path = mkdtemp(tpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST(NvidiaSmiCsv, FourGpusWithEveryFigure) {
  gpuinfo::GpuSnapshot s = sample_with("nvidia-smi-4gpu");
  EXPECT_EQ(s.source, "nvidia-smi");
  EXPECT_FALSE(s.host.empty());
  EXPECT_GT(s.time_ms, 1700000000000);
  ASSERT_EQ(s.gpus.size(), 4u);
  EXPECT_TRUE(s.problems.empty());
  const gpuinfo::GpuSample& g = s.gpus[2];
  EXPECT_EQ(g.index, 2);
  EXPECT_EQ(g.mig, -1);
  EXPECT_EQ(g.uuid, "GPU-b1c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d03");
  EXPECT_EQ(g.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(g.util_percent, 90.0);
  EXPECT_EQ(g.mem_used_mib, 38000.0);
  EXPECT_EQ(g.mem_total_mib, 40960.0);
  EXPECT_EQ(g.power_w, 390.5);
  EXPECT_EQ(g.temp_c, 71.0);
  ASSERT_NE(s.gpu(0), nullptr);
  EXPECT_EQ(s.gpu(0)->util_percent, 17.0);
  EXPECT_EQ(s.gpu(7), nullptr);
}

TEST(NvidiaSmiCsv, NotAvailableAndNotSupportedAreNoFigureNotZero) {
  gpuinfo::GpuSnapshot s = sample_with("nvidia-smi-na");
  ASSERT_EQ(s.gpus.size(), 4u);
  EXPECT_EQ(s.gpus[0].util_percent, 42.0);
  EXPECT_FALSE(s.gpus[0].power_w.has_value());       // [N/A]
  EXPECT_FALSE(s.gpus[1].util_percent.has_value());  // [Not Supported]
  EXPECT_EQ(s.gpus[1].power_w, 38.21);
  EXPECT_EQ(s.gpus[2].util_percent, 7.0);
  EXPECT_FALSE(s.gpus[2].mem_used_mib.has_value());
  EXPECT_FALSE(s.gpus[2].mem_total_mib.has_value());
  const gpuinfo::GpuSample& t4 = s.gpus[3];
  EXPECT_EQ(t4.name, "Tesla T4");
  EXPECT_FALSE(t4.util_percent || t4.mem_used_mib || t4.mem_total_mib || t4.power_w || t4.temp_c);
}

TEST(NvidiaSmiCsv, MigDevicesFollowTheirGpu) {
  gpuinfo::GpuSnapshot s = sample_with("nvidia-smi-mig");
  ASSERT_EQ(s.gpus.size(), 5u);  // GPU 0, its 3 MIG devices, GPU 1
  EXPECT_EQ(s.gpus[0].index, 0);
  EXPECT_EQ(s.gpus[0].mig, -1);
  EXPECT_FALSE(s.gpus[0].util_percent.has_value());  // no utilisation in MIG mode
  EXPECT_EQ(s.gpus[0].mem_used_mib, 15872.0);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(s.gpus[1 + k].index, 0);
    EXPECT_EQ(s.gpus[1 + k].mig, k);
  }
  EXPECT_EQ(s.gpus[1].name, "3g.40gb");
  EXPECT_EQ(s.gpus[3].name, "1g.10gb");
  EXPECT_EQ(s.gpus[3].uuid, "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c03");
  EXPECT_EQ(s.gpus[4].index, 1);
  EXPECT_EQ(s.gpus[4].util_percent, 63.0);
  EXPECT_EQ(s.gpu(1), &s.gpus[4]);
}

TEST(NvidiaSmiCsv, AGpuThatVanishesMidJobIsMissingAndNamed) {
  TempDir dir;
  std::string state = dir.path + "/calls";
  setenv("FAKE_NVIDIA_SMI_STATE", state.c_str(), 1);
  gpuinfo::GpuSampler sampler(gpuinfo::SamplerConfig{fixture("nvidia-smi-vanish")});
  for (int i = 0; i < 3; ++i) {
    gpuinfo::GpuSnapshot s = sampler.sample();
    EXPECT_EQ(s.gpus.size(), 4u) << "call " << i + 1;
    EXPECT_TRUE(s.problems.empty());
  }
  gpuinfo::GpuSnapshot s = sampler.sample();  // exit 15, GPU 2's row replaced by the driver's error
  unsetenv("FAKE_NVIDIA_SMI_STATE");
  ASSERT_EQ(s.gpus.size(), 3u);
  EXPECT_EQ(s.gpu(2), nullptr);
  EXPECT_EQ(s.gpu(3)->util_percent, 83.0);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0],
            "Unable to determine the device handle for GPU2: 0000:34:00.0: Unknown Error");
}

TEST(NvidiaSmiCsv, ParserKeepsWhatItCannotReadAsProblems) {
  auto r = gpuinfo::parse_nvidia_smi_csv(
      "0, GPU-a, A, Disabled, 1, 2, 3, 4, 5\n"
      "garbage line\n"
      "x, GPU-b, B, Disabled, 1, 2, 3, 4, 5\n"
      "1, GPU-c, C, Enabled, 50 %, 100 MiB, 200 MiB, 70.5 W, 40\r\n"
      "2, too, few\n"
      "No devices were found\n"
      "3, GPU-d, D, Disabled, 1e400, -, nan, inf, 0x10\n");
  ASSERT_EQ(r.gpus.size(), 3u);
  EXPECT_EQ(r.gpus[1].util_percent, 50.0);  // units tolerated (a call without nounits)
  EXPECT_EQ(r.gpus[1].mem_total_mib, 200.0);
  EXPECT_EQ(r.gpus[1].power_w, 70.5);
  EXPECT_EQ(r.mig_enabled, std::vector<int>{1});
  const gpuinfo::GpuSample& d = r.gpus[2];
  EXPECT_FALSE(d.util_percent || d.mem_used_mib || d.mem_total_mib || d.power_w || d.temp_c);
  EXPECT_EQ(r.problems,
            (std::vector<std::string>{"garbage line", "x, GPU-b, B, Disabled, 1, 2, 3, 4, 5",
                                      "2, too, few"}));
  EXPECT_TRUE(gpuinfo::parse_nvidia_smi_csv("").gpus.empty());
  std::string huge(5000, 'x');
  EXPECT_EQ(gpuinfo::parse_nvidia_smi_csv(huge).problems[0].size(), 200u);
}

TEST(NvidiaSmiCsv, MigListIgnoresLinesItDoesNotKnow) {
  auto m = gpuinfo::parse_nvidia_smi_mig_list(
      "  MIG 1g.5gb Device 0: (UUID: MIG-orphan)\n"  // no GPU line above: ignored
      "GPU 3: NVIDIA H100 (UUID: GPU-x)\n"
      "  MIG 1g.10gb     Device  5: (UUID: MIG-five)\n"
      "  MIG broken\n"
      "GPU x: odd\n"
      "  MIG 1g.10gb     Device  1: (UUID: MIG-lost)\n");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].index, 3);
  EXPECT_EQ(m[0].mig, 5);
  EXPECT_EQ(m[0].uuid, "MIG-five");
  EXPECT_EQ(m[0].name, "1g.10gb");
}

TEST(NvidiaSmiComputeApps, ProcessesWithTheirGpuAndMemory) {
  std::vector<std::string> problems;
  auto p = gpuinfo::parse_nvidia_smi_compute_apps(
      "GPU-3f1c2a9e-8b47-4c1d-9e0a-5b6d7c8e9f01, 4242, 27900\n"
      "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c01, 4194304, [N/A]\n"
      "\n",
      &problems);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].gpu_uuid, "GPU-3f1c2a9e-8b47-4c1d-9e0a-5b6d7c8e9f01");
  EXPECT_EQ(p[0].pid, 4242);
  EXPECT_EQ(p[0].used_mib, 27900);
  EXPECT_EQ(p[0].gpu, -1) << "the parser does not guess the index: the sampler maps UUIDs";
  EXPECT_EQ(p[1].pid, 4194304);
  EXPECT_FALSE(p[1].used_mib) << "[N/A] is no figure, not 0";
  EXPECT_TRUE(problems.empty());
  EXPECT_TRUE(gpuinfo::parse_nvidia_smi_compute_apps("No running processes found\n", &problems)
                  .empty());
  EXPECT_TRUE(problems.empty());
  auto bad = gpuinfo::parse_nvidia_smi_compute_apps(
      "GPU-x, 0, 1\nGPU-x, 4194305, 1\nGPU-x, 12\nxyz, 12, 1\nField \"gpu_uuid\" is not valid\n",
      &problems);
  EXPECT_TRUE(bad.empty());
  EXPECT_EQ(problems.size(), 5u);
}

TEST(GpuSampler, ListsComputeProcessesOnlyWhenAskedAndMapsThemToGpus) {
  TempDir dir;
  std::string apps = dir.path + "/apps";
  std::ofstream(apps) << "GPU-7a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c02, 777, 512\n"
                         "GPU-not-listed, 778, 1\n";
  setenv("FAKE_NVIDIA_SMI_APPS", apps.c_str(), 1);
  gpuinfo::SamplerConfig cfg{fixture("nvidia-smi-4gpu")};
  auto plain = gpuinfo::GpuSampler(cfg).sample();
  EXPECT_FALSE(plain.processes_read);
  EXPECT_TRUE(plain.processes.empty());
  cfg.processes = true;
  auto s = gpuinfo::GpuSampler(cfg).sample();
  ASSERT_TRUE(s.processes_read) << s.processes_error;
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_EQ(s.processes[0].gpu, 1);
  EXPECT_EQ(s.processes[0].pid, 777);
  EXPECT_EQ(s.processes[1].gpu, -1);
  // An nvidia-smi that does not know the query: no list (not an empty one), and why.
  cfg.nvidia_smi = fixture("nvidia-smi-node-skew");
  auto old = gpuinfo::GpuSampler(cfg).sample();
  unsetenv("FAKE_NVIDIA_SMI_APPS");
  EXPECT_FALSE(old.gpus.empty());
  EXPECT_FALSE(old.processes_read);
  EXPECT_NE(old.processes_error.find("--query-compute-apps"), std::string::npos)
      << old.processes_error;
}

TEST(GpuSampler, FailuresNameTheToolAndWhatItSaid) {
  std::string e = error_of([] { sample_with("nvidia-smi-broken"); });
  EXPECT_NE(e.find("nvidia-smi-broken"), std::string::npos) << e;
  EXPECT_NE(e.find("is not a valid field"), std::string::npos) << e;
  EXPECT_NE(e.find("exit 2"), std::string::npos) << e;

  e = error_of([] { gpuinfo::GpuSampler(gpuinfo::SamplerConfig{"/nonexistent/nvidia-smi"}).sample(); });
  EXPECT_NE(e.find("cannot run /nonexistent/nvidia-smi"), std::string::npos) << e;

  TempDir dir;
  std::string hung = dir.path + "/hung-nvidia-smi";
  std::ofstream(hung) << "#!/bin/sh\nexec sleep 30\n";
  std::filesystem::permissions(hung, std::filesystem::perms::owner_all);
  auto t0 = std::chrono::steady_clock::now();
  e = error_of([&] { gpuinfo::GpuSampler(gpuinfo::SamplerConfig{hung, 300}).sample(); });
  EXPECT_NE(e.find("did not answer within 300 ms"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(SnapshotLine, RoundTripsEveryFieldOnOneLine) {
  gpuinfo::GpuSnapshot s = sample_with("nvidia-smi-mig");
  s.host = "node 1,=%";  // spaces and separators must not break the line
  s.problems = {"Unable to determine the device handle for GPU2: 0000:34:00.0: Unknown Error"};
  s.gpus[4].name = "weird\nname, with=stuff %";
  std::string line = gpuinfo::encode_snapshot(s);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind("gpus/1 t=", 0), 0u) << line;
  gpuinfo::GpuSnapshot d = gpuinfo::decode_snapshot(line + "\n");
  EXPECT_EQ(d.time_ms, s.time_ms);
  EXPECT_EQ(d.host, s.host);
  EXPECT_EQ(d.source, "nvidia-smi");
  EXPECT_EQ(d.problems, s.problems);
  ASSERT_EQ(d.gpus.size(), s.gpus.size());
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    const gpuinfo::GpuSample &a = s.gpus[i], &b = d.gpus[i];
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.mig, b.mig);
    EXPECT_EQ(a.uuid, b.uuid);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.util_percent, b.util_percent);
    EXPECT_EQ(a.mem_used_mib, b.mem_used_mib);
    EXPECT_EQ(a.mem_total_mib, b.mem_total_mib);
    EXPECT_EQ(a.power_w, b.power_w);
    EXPECT_EQ(a.temp_c, b.temp_c);
  }
  gpuinfo::GpuSnapshot n;  // nothing but a time
  n.time_ms = 5;
  EXPECT_EQ(gpuinfo::decode_snapshot(gpuinfo::encode_snapshot(n)).gpus.size(), 0u);
  // A reader skips keys a newer writer added.
  EXPECT_EQ(gpuinfo::decode_snapshot("gpus/1 t=7 future=x").time_ms, 7);
}

TEST(SnapshotLine, MalformedLinesAreRefusedNamingTheField) {
  auto e = [](const std::string& line) { return error_of([&] { gpuinfo::decode_snapshot(line); }); };
  EXPECT_NE(e("").find("does not start with 'gpus/1'"), std::string::npos);
  EXPECT_NE(e("gpus/2 t=1").find("does not start"), std::string::npos);
  EXPECT_NE(e("gpus/1").find("no t="), std::string::npos);
  EXPECT_NE(e("gpus/1 t=abc").find("t is 'abc'"), std::string::npos);
  EXPECT_NE(e("gpus/1 t=1 g=0,-1,x,-,-,-,-,u,n").find("utilisation is 'x'"), std::string::npos);
  EXPECT_NE(e("gpus/1 t=1 g=0,-1").find("g= has 2 fields"), std::string::npos);
  EXPECT_NE(e("gpus/1 t=1 g=0,-1,-,-,-,-,-,%zz,n").find("uuid has a bad escape"),
            std::string::npos);
  EXPECT_NE(e("gpus/1 t=1  g=0").find("is not key=value"), std::string::npos);
  EXPECT_NE(e("gpus/1 t=1 =x").find("is not key=value"), std::string::npos);
}

TEST(ProcUsage, ParsesStatWithAwkwardCommandNames) {
  // A command name with spaces and parentheses; fields after it as proc(5) numbers them.
  std::string text =
      "4242 (my (odd) prog) S 1 4242 4200 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 3 0 9999 "
      "1000000 512 18446744073709551615";
  auto p = gpuinfo::parse_proc_stat(text, 100, 4096);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->pid, 4242);
  EXPECT_EQ(p->state, 'S');
  EXPECT_EQ(p->ppid, 1);
  EXPECT_EQ(p->pgid, 4242);
  EXPECT_EQ(p->sid, 4200);
  EXPECT_DOUBLE_EQ(p->cpu_seconds, 3.0);  // (250 + 50) / 100
  EXPECT_DOUBLE_EQ(p->children_cpu_seconds, 0.5);
  EXPECT_EQ(p->rss_bytes, 512 * 4096);
  EXPECT_EQ(p->start_ticks, 9999);  // field 22: with the pid, names one process for good
  EXPECT_FALSE(gpuinfo::parse_proc_stat("garbage", 100, 4096));
  EXPECT_FALSE(gpuinfo::parse_proc_stat("12 (x) S 1 2", 100, 4096));
}

TEST(ProcUsage, ASessionsCpuTimeIncludesChildrenItReaped) {
  // A child in its own session burns CPU in a grandchild it waits for; the session's figure
  // counts it through the child's cutime.
  pid_t child = fork();
  if (child == 0) {
    setsid();
    pid_t g = fork();
    if (g == 0) {
      // 0.3 s of its own CPU time, however loaded the machine is.
      volatile double x = 0;
      timespec t{};
      do {
        for (int i = 0; i < 100000; ++i) x = x + 1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
      } while (t.tv_sec * 1000 + t.tv_nsec / 1000000 < 300);
      _exit(0);
    }
    waitpid(g, nullptr, 0);
    pause();
    _exit(0);
  }
  gpuinfo::ProcessUsage u;
  for (int i = 0; i < 1200; ++i) {  // bounded: 60 s for the grandchild's 0.3 s of CPU to show
    u = gpuinfo::session_usage(gpuinfo::scan_processes(), child);
    if (u.processes == 1 && u.cpu_seconds >= 0.29) break;  // reaped, its time moved to cutime
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_GE(u.cpu_seconds, 0.29) << "the reaped grandchild's CPU time is missing";
  EXPECT_EQ(u.processes, 1);
  EXPECT_GT(u.rss_bytes, 0);
  EXPECT_EQ(u.source, "proc");
}

TEST(ProcUsage, CgroupV2Files) {
  std::map<std::string, std::string> files = {
      {"/cg/cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"},
      {"/cg/memory.current", "1048576\n"},
      {"/cg/memory.peak", "4194304\n"},
      {"/cg/cgroup.procs", "10\n11\n12\n"}};
  auto read = [&](const std::string& p) -> std::optional<std::string> {
    auto it = files.find(p);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  auto u = gpuinfo::cgroup_usage("/cg", read);
  ASSERT_TRUE(u);
  EXPECT_DOUBLE_EQ(u->cpu_seconds, 2.5);
  EXPECT_EQ(u->rss_bytes, 1048576);
  EXPECT_EQ(u->peak_rss_bytes, 4194304);
  EXPECT_EQ(u->processes, 3);
  EXPECT_EQ(u->source, "cgroup");
  files.erase("/cg/memory.peak");  // kernels before 5.19: the current figure is the best we have
  EXPECT_EQ(gpuinfo::cgroup_usage("/cg", read)->peak_rss_bytes, 1048576);
  files["/cg/cpu.stat"] = "user_usec 1\n";
  EXPECT_FALSE(gpuinfo::cgroup_usage("/cg", read));
  EXPECT_FALSE(gpuinfo::cgroup_usage("/none", read));
}

// End-to-end: GPUs used outside the queue, and the idle and busy flags (issue 30, items 3 and 4),
// with a real daemon sampling fake GPUs: nvidia-smi-4gpu (tests/launcher/fixtures/nvidia-smi)
// lists as compute processes whatever the file $FAKE_NVIDIA_SMI_APPS holds, and the processes
// named there are real ones started here (a `sleep`, as another Unix user when run as root), so
// the daemon finds their owner and session in /proc as it would on a GPU machine.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "gpurun/queue/web_render.h"
#include "harness.h"

extern char** environ;
using namespace gpuq_test;

namespace {

// nvidia-smi-4gpu's UUIDs, by GPU index.
const char* kUuid[] = {"GPU-3f1c2a9e-8b47-4c1d-9e0a-5b6d7c8e9f01",
                       "GPU-7a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c02",
                       "GPU-b1c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d03",
                       "GPU-c9d8e7f6-a5b4-4c3d-2e1f-0a9b8c7d6e04"};

// The fixture GPUs, and the file of compute processes they list; set before the daemon starts.
struct FakeGpusWithApps {
  std::string apps;
  explicit FakeGpusWithApps(const std::string& dir) : apps(dir + "/nvidia-smi-apps") {
    setenv("GPURUN_NVIDIA_SMI",
           (std::string(GPURUN_FIXTURES) + "/nvidia-smi/nvidia-smi-4gpu").c_str(), 1);
    setenv("FAKE_NVIDIA_SMI_APPS", apps.c_str(), 1);
    set("");
  }
  ~FakeGpusWithApps() {
    unsetenv("GPURUN_NVIDIA_SMI");
    unsetenv("FAKE_NVIDIA_SMI_APPS");
  }
  void set(const std::string& lines) const {  // whole, by rename: the sampler never reads half
    std::ofstream(apps + ".tmp") << lines;
    std::rename((apps + ".tmp").c_str(), apps.c_str());
  }
  void use(int gpu, pid_t pid, int mib = 27900) const {
    set(fmt::format("{}, {}, {}\n", kUuid[gpu], pid, mib));
  }
};

// A process outside the queue: `sleep 300`, as `user` when one is given (setpriv execs, so the
// pid is the sleep's and /proc shows its owner). Killed and reaped on destruction.
struct Outsider {
  pid_t pid = -1;
  explicit Outsider(const TestUser* user = nullptr) {
    std::vector<std::string> args = {"/bin/sleep", "300"};
    if (user)
      args = {"/usr/bin/setpriv", fmt::format("--reuid={}", user->uid()),
              fmt::format("--regid={}", user->gid()), "--clear-groups", "/bin/sleep", "300"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start " + args[0]);
  }
  void end() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~Outsider() { end(); }
};

nlohmann::json status(const Daemon& d) {
  return d.request(R"({"op":"status"})");
}

// Waits (bounded) until pred(status) holds; fails naming what it waited for, with the status.
template <class Pred>
nlohmann::json wait_status(const Daemon& d, const std::string& what, Pred pred,
                           double timeout_s = 20) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int(timeout_s * 1000));
  nlohmann::json s;
  while (std::chrono::steady_clock::now() < deadline) {
    s = status(d);
    if (pred(s)) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error(fmt::format("waited {} s for {}; status: {}\ndaemon log:\n{}",
                                       timeout_s, what, s.dump(), d.log()));
}

const nlohmann::json& gpu(const nlohmann::json& s, int id) {
  for (const auto& g : s["gpus"])
    if (g["id"] == id) return g;
  throw std::runtime_error(fmt::format("GPU {} is not in the status", id));
}

// The job's reason as `gpuq queue` prints it: "(GpuBusyOutsideQueue)" in its last column.
std::string queue_reason(const Daemon& d, int64_t id) {
  Result r = d.gpuq("queue --noheader");
  for (const auto& line : lines(r.out)) {
    size_t open = line.rfind('('), close = line.rfind(')');
    if (line.find(std::to_string(id)) != std::string::npos && open != std::string::npos &&
        close > open)
      return line.substr(open + 1, close - open - 1);
  }
  return "<not pending in the queue: " + r.out + r.err + ">";
}

}  // namespace

// The issue's case: a process that no job owns keeps its GPU out of the queue, with the reason and
// the process's user shown, through a daemon kill -9, and the GPU returns once it is gone; the job
// then runs once.
TEST(GpuqOutside, AProcessOutsideTheQueueKeepsItsGpuOutUntilItExits) {
  TempDir tmp;
  FakeGpusWithApps fake(tmp.path());
  std::unique_ptr<TestUser> user;
  if (geteuid() == 0) user = std::make_unique<TestUser>("gqo");
  Outsider outsider(user.get());
  const std::string owner = user ? user->name() : std::string(getenv("USER") ? getenv("USER") : "");
  fake.use(0, outsider.pid);
  Daemon d({"--sample-interval", "1"}, "0");
  auto s = wait_status(d, "GPU 0 kept out", [](const nlohmann::json& s) {
    return gpu(s, 0)["state"] == "outside";
  });
  const auto& use = gpu(s, 0)["outside"].at(0);
  EXPECT_EQ(use["pid"], outsider.pid);
  EXPECT_EQ(use["command"], "sleep");
  if (user) {
    EXPECT_EQ(use["user"], owner);
  }
  EXPECT_EQ(use["mem_used_mib"], 27900);

  std::string ran = tmp.path() + "/ran";
  d.script("job.sh", fmt::format("#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES\" >> {}\n", ran));
  int64_t id = d.submit("--gres=gpu:1 job.sh");
  std::this_thread::sleep_for(std::chrono::seconds(3));  // three samples, all with the process
  EXPECT_EQ(queue_reason(d, id), "GpuBusyOutsideQueue") << d.log();
  EXPECT_NE(d.log().find(fmt::format("GPU 0: used outside the queue by pid {} ({}, sleep)",
                                     outsider.pid, user ? owner : use["user"].get<std::string>())),
            std::string::npos)
      << d.log();

  d.kill9();  // the reason is the GPUs' state: a new daemon finds it again before it starts jobs
  d.start();
  wait_status(d, "GPU 0 kept out after a restart",
              [](const nlohmann::json& s) { return gpu(s, 0)["state"] == "outside"; });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(queue_reason(d, id), "GpuBusyOutsideQueue") << d.log();
  EXPECT_FALSE(std::ifstream(ran).good()) << "the job ran on a GPU used outside the queue";

  outsider.end();
  fake.set("");  // as the driver does: a process that exited is no longer listed
  auto j = d.wait_final(id, 20);
  EXPECT_EQ(j["state"], "COMPLETED") << d.log();
  EXPECT_EQ(read_text(ran), "0\n") << "the job ran other than once";
  EXPECT_NE(d.log().find("GPU 0: no longer used outside the queue"), std::string::npos) << d.log();
}

// Before it gives GPUs out, the daemon looks afresh: a process that appeared after the last
// periodic sample (an hour apart here) still keeps its GPU out, and the job gets the other one.
TEST(GpuqOutside, TheDaemonLooksAfreshBeforeItGivesAGpuOut) {
  TempDir tmp;
  FakeGpusWithApps fake(tmp.path());
  Outsider outsider;
  Daemon d({"--sample-interval", "3600"}, "0,1");
  wait_status(d, "the first sample", [](const nlohmann::json& s) {
    return s["sampler"]["time_ms"].get<int64_t>() > 0;
  });
  fake.use(0, outsider.pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // the first sample is stale now
  d.script("job.sh", "#!/bin/sh\nsleep 1\n");
  int64_t id = d.submit("--gres=gpu:1 job.sh");
  auto j = d.wait_state(id, "RUNNING", 20);
  EXPECT_EQ(j["gpus"], nlohmann::json::array({1})) << d.log();
  EXPECT_EQ(gpu(status(d), 0)["state"], "outside");
}

// --gpu-outside-queue ignore: the process is shown, the GPU is given out all the same.
TEST(GpuqOutside, IgnoreShowsTheProcessButGivesTheGpuOut) {
  TempDir tmp;
  FakeGpusWithApps fake(tmp.path());
  Outsider outsider;
  fake.use(0, outsider.pid);
  Daemon d({"--sample-interval", "1", "--gpu-outside-queue", "ignore"}, "0");
  auto s = wait_status(d, "the process on GPU 0 seen", [](const nlohmann::json& s) {
    return gpu(s, 0)["outside"].size() == 1;
  });
  EXPECT_EQ(gpu(s, 0)["state"], "free");
  EXPECT_TRUE(gpu(s, 0)["busy_without_job"].get<bool>());
  d.script("job.sh", "#!/bin/sh\nsleep 1\n");
  int64_t id = d.submit("--gres=gpu:1 job.sh");
  EXPECT_EQ(d.wait_final(id, 20)["state"], "COMPLETED");
  Result bad = sh(d.cli() + " daemon --gpu-outside-queue maybe --gpus 0 --state-dir " + tmp.path() +
                  "/x --socket " + tmp.path() + "/x.sock");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--gpu-outside-queue 'maybe': expected avoid or ignore"),
            std::string::npos)
      << bad.err;
}

// A job's own process on its GPU is the queue's: not outside, and the next job waits for
// Resources, not for GpuBusyOutsideQueue.
TEST(GpuqOutside, AJobsOwnProcessOnItsGpuIsNotOutside) {
  TempDir tmp;
  FakeGpusWithApps fake(tmp.path());
  Daemon d({"--sample-interval", "1"}, "0");
  d.script("job.sh", fmt::format("#!/bin/sh\nprintf '{}, %s, 100\\n' $$ > {}.tmp\n"
                                 "mv {}.tmp {}\nsleep 4\n",
                                 kUuid[0], fake.apps, fake.apps, fake.apps));
  int64_t first = d.submit("--gres=gpu:1 job.sh");
  d.wait_state(first, "RUNNING", 20);
  int64_t second = d.submit("--gres=gpu:1 job.sh");
  wait_status(d, "the first job's process listed", [&](const nlohmann::json& s) {
    return s["sampler"]["time_ms"].get<int64_t>() > 0 && read_text(fake.apps).find(", ") != std::string::npos;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a sample with it listed
  auto s = status(d);
  EXPECT_EQ(gpu(s, 0)["state"], "busy");
  EXPECT_TRUE(gpu(s, 0)["outside"].empty()) << s.dump();
  EXPECT_EQ(queue_reason(d, second), "Resources") << d.log();
  fake.set("");
  d.wait_final(first, 20);
  d.gpuq(fmt::format("cancel {}", second));
}

// The flags: a job that holds its GPU below --idle-percent for --idle-minutes, and a GPU that no
// job holds but that is busy, on /api/status and in /metrics (rendered from that status); the idle
// run survives a daemon kill -9 (rebuilt from the stored samples).
TEST(GpuqOutside, IdleHeldAndBusyWithoutAJobAreFlagged) {
  TempDir tmp;
  FakeGpusWithApps fake(tmp.path());
  // The job gets GPU 0, which reads 17%: idle below 20%. GPU 2 reads 90% with no job.
  Daemon d({"--sample-interval", "1", "--idle-percent", "20", "--idle-minutes", "0.05"}, "0,2");
  d.script("job.sh", "#!/bin/sh\nsleep 60\n");
  int64_t id = d.submit("--gres=gpu:1 job.sh");
  auto s = wait_status(d, "GPU 0 flagged idle",
                       [](const nlohmann::json& s) { return gpu(s, 0)["idle"] == true; });
  EXPECT_EQ(gpu(s, 0)["job"]["job_id"], id);
  EXPECT_FALSE(gpu(s, 0)["busy_without_job"].get<bool>());
  EXPECT_TRUE(gpu(s, 2)["busy_without_job"].get<bool>());
  EXPECT_EQ(gpu(s, 2)["state"], "free");
  EXPECT_FALSE(gpu(s, 2)["idle"].get<bool>());
  const std::string metrics = gpurun::queue::render_metrics(s);
  const std::string user = gpu(s, 0)["job"]["user"].get<std::string>();
  EXPECT_NE(metrics.find(fmt::format("gpuq_job_gpu_idle{{gpu=\"0\",job=\"{}\",user=\"{}\"}} 1\n",
                                     id, user)),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuq_gpu_busy_without_job{gpu=\"2\"} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gpuq_gpu_busy_without_job{gpu=\"0\"} 0\n"), std::string::npos) << metrics;
  const int64_t since = gpu(s, 0)["idle_since_ms"].get<int64_t>();

  d.kill9();
  d.start();
  s = status(d);
  EXPECT_TRUE(gpu(s, 0)["idle"].get<bool>()) << "the idle run was lost in the restart: " << s.dump();
  EXPECT_LE(std::abs(gpu(s, 0)["idle_since_ms"].get<int64_t>() - since), 1500) << s.dump();
  d.gpuq(fmt::format("cancel {}", id));
  d.wait_final(id, 40);
}

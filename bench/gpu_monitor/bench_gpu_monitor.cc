// GPU monitoring benchmark (issue 12): what sampling costs, and how fast gpuq web answers with a
// long history. Prints Markdown; each figure is set against its target (no peer exists for these).
//   bench_gpu_monitor --gpuq PATH --fixtures DIR [--ticks 200] [--seconds 60] [--jobs 10000]
//                     [--requests 200] [--dir DIR]
// 1. One sampling tick as the daemon's thread does it, in this process, timed in CPU (this
//    process's and its children's rusage): 8 fake GPUs through nvidia-smi-8gpu (a shell script:
//    fork, exec of /bin/sh and cat), a /proc scan and 8 job sessions, and the store writes of a
//    tick (8 samples, 8 job updates, one commit with fsync).
// 2. The real daemon with 8 running jobs: its own CPU time (from /proc, children excluded: it
//    ignores SIGCHLD, so the kernel does not add reaped children to it) sampling every second,
//    against the same daemon with sampling off.
// 3. gpuq web with 10,000 finished jobs in the store plus 8 running and 100 pending: wall time
//    of GET /, /metrics, /api/status and a job page, request to last byte, over loopback.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "gpurun/gpuinfo/gpu_sampler.h"
#include "gpurun/gpuinfo/proc_usage.h"
#include "gpurun/queue/job.h"
#include "supervise/runfiles.h"
#include "daemon/store.h"

extern char** environ;
using namespace gpurun;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string gpuq, fixtures, dir = "/var/tmp/gpuq-monitor-bench";
  int ticks = 200, seconds = 60, jobs = 10000, requests = 200;
};

double cpu_seconds(int who) {
  rusage r{};
  getrusage(who, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

double process_cpu(pid_t pid) {  // utime + stime of one process, from /proc
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto p = gpuinfo::parse_proc_stat(text, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE));
  return p ? p->cpu_seconds : 0;
}

struct Stats {
  double median, p99, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  return {at(0.5), at(0.99), v.back()};
}

pid_t spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("cannot start " + args[0]);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void wait_until(const std::function<bool()>& ok, const std::string& what, int seconds) {
  auto end = Clock::now() + std::chrono::seconds(seconds);
  while (!ok()) {
    if (Clock::now() > end) throw std::runtime_error("timed out waiting for " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// One HTTP GET over loopback; returns the wall time in ms and fails on anything but 200.
double http_get_ms(int port, const std::string& path) {
  auto t0 = Clock::now();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    throw std::runtime_error("connect to gpuq web failed");
  std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    throw std::runtime_error("send failed");
  std::string text;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (text.rfind("HTTP/1.1 200", 0) != 0)
    throw std::runtime_error(fmt::format("GET {}: {}", path, text.substr(0, 60)));
  return ms;
}

void part_sampler(const Options& o) {
  std::string smi = o.fixtures + "/nvidia-smi/nvidia-smi-8gpu";
  gpuinfo::GpuSampler sampler(gpuinfo::SamplerConfig{smi});
  std::string db = o.dir + "/tick.db";
  std::filesystem::remove(db);
  queue::Store store(db);
  std::vector<queue::Job> jobs(8);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].user = "u";
    jobs[i].state = queue::JobState::kRunning;
    jobs[i].gpus = {static_cast<int>(i)};
    store.insert_job(jobs[i]);
  }
  double t_gpu = 0, t_proc = 0, t_store = 0;
  auto cpu = [] { return cpu_seconds(RUSAGE_SELF) + cpu_seconds(RUSAGE_CHILDREN); };
  for (int k = 0; k < o.ticks; ++k) {
    double c0 = cpu();
    gpuinfo::GpuSnapshot s = sampler.sample();
    double c1 = cpu();
    auto procs = gpuinfo::scan_processes();
    for (int i = 0; i < 8; ++i) gpuinfo::session_usage(procs, getsid(0) + i);
    double c2 = cpu();
    store.begin_batch();
    std::vector<queue::Store::Sample> rows;
    for (auto& j : jobs) {
      const auto* g = s.gpu(j.gpus[0]);
      rows.push_back({s.time_ms, g->index, j.id, g->util_percent, g->mem_used_mib, g->mem_total_mib,
                      g->power_w, g->temp_c});
      j.usage.util_samples += 1;
      store.update_job(j);
    }
    store.insert_samples(rows);
    store.commit_batch();
    t_gpu += c1 - c0;
    t_proc += c2 - c1;
    t_store += cpu() - c2;
  }
  size_t procs = gpuinfo::scan_processes().size();
  double per_tick = (t_gpu + t_proc + t_store) / o.ticks;
  fmt::print(
      "## 1. One sampling tick, in this process ({} ticks)\n\n"
      "| part | CPU ms per tick |\n|---|---:|\n"
      "| 8 GPUs through the fixture nvidia-smi (fork + exec of sh and cat, parse) | {:.2f} |\n"
      "| /proc scan ({} processes) + 8 job sessions | {:.2f} |\n"
      "| store: 8 samples + 8 job updates, one commit | {:.2f} |\n"
      "| **total** | **{:.2f}** |\n\n"
      "Every 10 s that is **{:.4f}% of one core** (target < 1%: {:.0f}x below it).\n\n",
      o.ticks, t_gpu / o.ticks * 1e3, procs, t_proc / o.ticks * 1e3, t_store / o.ticks * 1e3,
      per_tick * 1e3, per_tick / 10 * 100, 1.0 / (per_tick / 10 * 100));
}

// Starts a daemon on 8 fake GPUs with 8 one-GPU jobs running; returns its pid.
pid_t daemon_with_jobs(const Options& o, const std::string& state, int interval) {
  std::string sock = state + ".sock";
  setenv("GPURUN_NVIDIA_SMI", (o.fixtures + "/nvidia-smi/nvidia-smi-8gpu").c_str(), 1);
  pid_t d = spawn({o.gpuq, "daemon", "--gpus", "0,1,2,3,4,5,6,7", "--state-dir", state, "--socket",
                   sock, "--sample-interval", std::to_string(interval)},
                  "/dev/null", o.dir + "/daemon.log");
  unsetenv("GPURUN_NVIDIA_SMI");
  std::string cli = fmt::format("GPUQ_SOCKET={} {}", sock, o.gpuq);
  wait_until([&] { return sh(cli + " queue >/dev/null 2>&1") == 0; }, "the daemon", 20);
  std::ofstream(o.dir + "/sleep.sh") << "#!/bin/sh\nsleep 100000\n";
  for (int i = 0; i < 8; ++i)
    sh(fmt::format("cd {} && {} submit --gres=gpu:1 sleep.sh >/dev/null", o.dir, cli));
  wait_until([&] { return sh(cli + " queue | grep -c ' R ' | grep -qx 8") == 0; }, "8 jobs", 30);
  return d;
}

void stop_daemon(const Options& o, pid_t d, const std::string& state) {
  std::string cli = fmt::format("GPUQ_SOCKET={}.sock {}", state, o.gpuq);
  sh(cli + " cancel $(" + cli + " queue --noheader | awk '{print $1}') >/dev/null 2>&1");
  wait_until([&] { return sh(cli + " queue --noheader | grep -q .") != 0; }, "jobs to end", 60);
  ::kill(d, SIGTERM);
  waitpid(d, nullptr, 0);
}

void part_daemon(const Options& o) {
  std::map<int, double> per_s;
  for (int interval : {0, 1}) {
    std::string state = fmt::format("{}/daemon-{}", o.dir, interval);
    std::filesystem::remove_all(state);
    pid_t d = daemon_with_jobs(o, state, interval);
    double c0 = process_cpu(d);
    std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
    per_s[interval] = (process_cpu(d) - c0) / o.seconds;
    stop_daemon(o, d, state);
  }
  double tick = per_s[1] - per_s[0];  // one tick a second
  fmt::print(
      "## 2. The daemon itself, 8 running jobs, {} s each\n\n"
      "| daemon | CPU ms per second |\n|---|---:|\n| sampling off | {:.3f} |\n"
      "| sampling every 1 s | {:.3f} |\n\n"
      "Sampling adds {:.2f} ms of the daemon's own CPU per tick (its thread, /proc scan, store "
      "writes; the nvidia-smi child is in part 1): every 10 s, {:.4f}% of a core.\n\n",
      o.seconds, per_s[0] * 1e3, per_s[1] * 1e3, tick * 1e3, tick / 10 * 100);
}

void fill_history(const Options& o, const std::string& state) {
  std::filesystem::create_directories(state);
  queue::Store store(state + "/jobs.db");
  store.begin_batch();
  const int64_t now = queue::now_ms();
  for (int i = 0; i < o.jobs; ++i) {
    queue::Job j;
    j.uid = 0;
    j.user = fmt::format("user{:02}", i % 40);
    j.account = fmt::format("group{}", i % 5);
    j.name = fmt::format("sweep-{}", i);
    j.state = i % 10 ? queue::JobState::kCompleted : queue::JobState::kFailed;
    j.gpus = {i % 8};
    j.start_ms = now - int64_t{o.jobs - i} * 60000;
    j.end_ms = j.start_ms + 50000;
    j.usage.util_samples = 5;
    j.usage.util_sum = 5.0 * (i % 100);
    store.insert_job(j);
  }
  store.commit_batch();
}

void part_web(const Options& o) {
  std::string state = o.dir + "/web-state";
  std::filesystem::remove_all(state);
  fill_history(o, state);
  pid_t d = daemon_with_jobs(o, state, 1);
  std::string cli = fmt::format("GPUQ_SOCKET={}.sock {}", state, o.gpuq);
  for (int i = 0; i < 100; ++i)
    sh(fmt::format("cd {} && {} submit --gres=gpu:1 -J waiting sleep.sh >/dev/null", o.dir, cli));
  pid_t w = spawn({o.gpuq, "web", "--listen", "127.0.0.1:0", "--socket", state + ".sock"},
                  o.dir + "/web.out", o.dir + "/web.err");
  int port = 0;
  wait_until(
      [&] {
        std::ifstream in(o.dir + "/web.out");
        std::string line;
        std::getline(in, line);
        auto at = line.find("127.0.0.1:");
        if (at != std::string::npos) port = std::stoi(line.substr(at + 10));
        return port != 0;
      },
      "gpuq web", 20);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a few samples for the sparklines
  fmt::print("## 3. gpuq web, {} finished jobs in the store, 8 running, 100 pending\n\n", o.jobs);
  fmt::print("| request | n | median ms | p99 ms | max ms | target | median vs target |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|\n");
  const std::vector<std::tuple<std::string, std::string, double>> paths = {
      {"GET / (the page)", "/", 50},
      {"GET /metrics", "/metrics", 20},
      {"GET /api/status", "/api/status", 0},
      {"GET /job/10001 (a running job)", "/job/10001", 0}};
  for (const auto& [label, path, target] : paths) {
    std::vector<double> ms;
    http_get_ms(port, path);  // warm
    for (int i = 0; i < o.requests; ++i) ms.push_back(http_get_ms(port, path));
    Stats s = stats(ms);
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {} | {} |\n", label, ms.size(), s.median,
               s.p99, s.max, target > 0 ? fmt::format("< {:.0f} ms", target) : "-",
               target > 0 ? fmt::format("{:.1f}x below", target / s.median) : "-");
  }
  fmt::print("\n");
  ::kill(w, SIGTERM);
  waitpid(w, nullptr, 0);
  stop_daemon(o, d, state);
}

void machine() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  utsname u{};
  uname(&u);
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  fmt::print("Machine: {} x {}, Linux {}; load average {:.2f} {:.2f} {:.2f} at the start.\n\n",
             std::thread::hardware_concurrency(), model, u.release, load[0], load[1], load[2]);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--gpuq")
      o.gpuq = v;
    else if (k == "--fixtures")
      o.fixtures = v;
    else if (k == "--dir")
      o.dir = v;
    else if (k == "--ticks")
      o.ticks = std::stoi(v);
    else if (k == "--seconds")
      o.seconds = std::stoi(v);
    else if (k == "--jobs")
      o.jobs = std::stoi(v);
    else if (k == "--requests")
      o.requests = std::stoi(v);
    else {
      fmt::print(stderr, "bench_gpu_monitor: unknown option {}\n", k);
      return 2;
    }
  }
  if (o.gpuq.empty()) o.gpuq = GPUQ_BIN;
  if (o.fixtures.empty()) o.fixtures = GPURUN_FIXTURES;
  std::filesystem::create_directories(o.dir);
  try {
    fmt::print("# GPU monitoring benchmark\n\n");
    machine();
    part_sampler(o);
    part_daemon(o);
    part_web(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpu_monitor: {}\n", e.what());
    return 1;
  }
  return 0;
}

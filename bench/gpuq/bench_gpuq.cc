// gpuq benchmark: submit latency and dispatch latency (a GPU frees -> the next job starts),
// median and p99 over 1,000 jobs, and `gpuq queue` with 10,000 jobs waiting.
//   bench_gpuq [--gpuq PATH] [--jobs 1000] [--waiting 10000] [--dir DIR]
// It starts its own daemon on a temp state dir (1 GPU id, so jobs run one after another) and
// prints a Markdown report. Dispatch latency is measured from inside the jobs: the previous job's
// last instruction to the next job's first instruction ($EPOCHREALTIME, no fork), so it includes
// the supervisor's exit, the daemon's two durable commits, spawning the next supervisor and bash.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpurun/queue/protocol.h"
#include "gpurun/queue/sbatch.h"
#include "job/request.h"

extern char** environ;
using namespace gpurun::queue;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Stats {
  double median, p99, max;
  size_t n;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  return {at(0.5), at(0.99), v.back(), v.size()};
}

std::vector<double> fsync_probe(const std::string& dir) {
  std::vector<double> out;
  std::string probe = dir + "/fsync.probe";
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string page(4096, 'x');
  for (int i = 0; i < 200; ++i) {
    auto t0 = Clock::now();
    if (::pwrite(fd, page.data(), page.size(), 0) != 4096 || ::fsync(fd) != 0) break;
    out.push_back(ms_since(t0));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return out;
}

nlohmann::json request(const std::string& socket, const nlohmann::json& req) {
  Fd fd = connect_unix(socket);
  write_all(fd.get(), frame(req.dump()));
  auto reply = nlohmann::json::parse(read_frame(fd.get(), kMaxReplyBytes));
  if (!reply.value("ok", false)) throw std::runtime_error(reply.value("error", "request failed"));
  return reply;
}

int run_cmd(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

}  // namespace

int main(int argc, char** argv) {
  std::string gpuq = GPUQ_BIN;
  int jobs = 1000, waiting = 10000;
  std::string dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--gpuq")
      gpuq = argv[i + 1];
    else if (a == "--jobs")
      jobs = std::atoi(argv[i + 1]);
    else if (a == "--waiting")
      waiting = std::atoi(argv[i + 1]);
    else if (a == "--dir")
      dir = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: bench_gpuq [--gpuq PATH] [--jobs N] [--waiting N] [--dir DIR]\n");
      return 2;
    }
  }
  if (dir.empty()) {
    char tpl[] = "/tmp/gpuq-bench-XXXXXX";
    dir = mkdtemp(tpl);
  }
  std::filesystem::create_directories(dir);
  const std::string socket = dir + "/gpuq.sock";
  std::vector<std::string> args = {gpuq,          "daemon",       "--gpus",   "0",
                                   "--state-dir", dir + "/state", "--socket", socket};
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  pid_t daemon = 0;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  std::string log = dir + "/daemon.log";
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (posix_spawn(&daemon, gpuq.c_str(), &fa, nullptr, av.data(), environ) != 0) {
    std::fprintf(stderr, "cannot start %s\n", gpuq.c_str());
    return 1;
  }
  for (int i = 0; i < 500; ++i) {
    try {
      request(socket, {{"op", "ping"}});
      break;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const std::string stamps = dir + "/stamps.log";
  const std::string script =
      "#!/bin/bash\n#SBATCH --gres=gpu:1 -o /dev/null\n"
      "echo \"s $GPUQ_JOB_ID $EPOCHREALTIME\" >> " +
      stamps +
      "\n"
      "echo \"e $GPUQ_JOB_ID $EPOCHREALTIME\" >> " +
      stamps + "\n";
  // As gpuq submit does: #SBATCH lines and options parsed here, the typed request sent.
  auto submit = [&](int i, const std::vector<std::string>& options) {
    gpurun::queue::SubmitRequest req;
    req.script = script;
    req.script_name = "bench.sh";
    req.cwd = dir;
    req.env = env;
    req.submit_key = fmt::format("bench-{}-{}", getpid(), i);
    req.job = gpurun::queue::parse_sbatch_script(script);
    req.job.merge_from(gpurun::queue::parse_sbatch_options(options));
    return request(socket, gpurun::queue::encode_submit(req))["job_id"].get<int64_t>();
  };

  // The disk's own fsync latency, before and after the run: every submit and dispatch pays one
  // WAL fsync, so this is the floor under both (and explains noisy runs on a shared machine).
  std::vector<double> fsync_before_ms = fsync_probe(dir);

  // 1. Submit latency (request round trip, durable commit included), queue drained so that
  //    dispatch does not interleave; then the same through the gpuq CLI process.
  request(socket, {{"op", "drain"}});
  std::vector<double> submit_ms;
  int64_t first = 0, last = 0;
  for (int i = 0; i < jobs; ++i) {
    auto t0 = Clock::now();
    last = submit(i, {});
    submit_ms.push_back(ms_since(t0));
    if (i == 0) first = last;
  }
  std::ofstream(dir + "/cli.sh") << script;
  std::vector<double> cli_ms;
  for (int i = 0; i < 100; ++i) {
    auto t0 = Clock::now();
    if (run_cmd(fmt::format("cd {} && GPUQ_SOCKET={} {} submit --hold cli.sh >/dev/null", dir,
                            socket, gpuq)) != 0)
      throw std::runtime_error("gpuq submit failed");
    cli_ms.push_back(ms_since(t0));
  }

  // 2. Dispatch latency: release the drained queue on one GPU and let the jobs run back to back.
  auto t_run = Clock::now();
  request(socket, {{"op", "resume"}});
  while (true) {
    auto q = request(socket, {{"op", "show"}, {"ids", {std::to_string(last)}}});
    std::string st = q["jobs"][0]["state"];
    if (st != "PENDING" && st != "RUNNING") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  double run_s = ms_since(t_run) / 1000;
  std::map<int64_t, std::pair<double, double>> se;
  {
    std::ifstream in(stamps);
    std::string kind;
    int64_t id;
    double t;
    while (in >> kind >> id >> t) (kind == "s" ? se[id].first : se[id].second) = t;
  }
  std::vector<double> dispatch_ms;
  for (int64_t id = first + 1; id <= last; ++id)
    if (se.count(id) && se.count(id - 1))
      dispatch_ms.push_back((se[id].first - se[id - 1].second) * 1000);

  // 3. `gpuq queue` with N jobs waiting (held, so nothing starts): submitted as arrays of 1,000.
  request(socket, {{"op", "drain"}});
  for (int done = 0; done < waiting; done += 1000) {
    int n = std::min(1000, waiting - done);
    submit(1000000 + done, {"--hold", fmt::format("--array=0-{}", n - 1)});
  }
  auto q = request(socket, {{"op", "queue"}});
  size_t listed = q["jobs"].size();
  std::vector<double> queue_ms, queue_json_ms;
  for (int i = 0; i < 10; ++i) {
    auto t0 = Clock::now();
    run_cmd(fmt::format("GPUQ_SOCKET={} {} queue > /dev/null", socket, gpuq));
    queue_ms.push_back(ms_since(t0));
    t0 = Clock::now();
    run_cmd(fmt::format("GPUQ_SOCKET={} {} queue --json > /dev/null", socket, gpuq));
    queue_json_ms.push_back(ms_since(t0));
  }
  std::vector<double> submit_busy_ms;
  for (int i = 0; i < 200; ++i) {
    auto t0 = Clock::now();
    submit(2000000 + i, {"--hold"});
    submit_busy_ms.push_back(ms_since(t0));
  }

  std::vector<double> fsync_after_ms = fsync_probe(dir);

  kill(daemon, SIGTERM);
  int st;
  waitpid(daemon, &st, 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);

  auto row = [](const char* what, const Stats& s, const char* target) {
    std::printf("| %s | %zu | %.2f | %.2f | %.2f | %s |\n", what, s.n, s.median, s.p99, s.max,
                target);
  };
  std::printf("| measurement | samples | median ms | p99 ms | max ms | target |\n");
  std::printf("|---|---|---|---|---|---|\n");
  row("submit, request round trip (empty -> 1,000 queued)", stats(submit_ms), "<= 5 ms");
  row("submit, `gpuq submit` process wall time", stats(cli_ms), "-");
  row("dispatch, previous job's end -> next job's start", stats(dispatch_ms), "<= 50 ms");
  row(fmt::format("`gpuq queue`, {} jobs listed (process wall time)", listed).c_str(),
      stats(queue_ms), "<= 200 ms");
  row(fmt::format("`gpuq queue --json`, {} jobs listed", listed).c_str(), stats(queue_json_ms),
      "-");
  row(fmt::format("submit, request round trip with {} waiting", listed).c_str(),
      stats(submit_busy_ms), "-");
  row("4 KiB write + fsync on the state dir's filesystem, before the run", stats(fsync_before_ms),
      "-");
  row("4 KiB write + fsync on the state dir's filesystem, after the run", stats(fsync_after_ms),
      "-");
  std::printf("\n%d jobs ran back to back on one GPU id in %.1f s.\n", jobs, run_s);
  return 0;
}

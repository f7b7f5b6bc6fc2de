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

struct Options {
  std::string gpuq = GPUQ_BIN;
  int jobs = 1000, waiting = 10000;
  std::string dir;
};

// False (after the usage line) on a bad argument.
bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--gpuq")
      o.gpuq = argv[i + 1];
    else if (a == "--jobs")
      o.jobs = std::atoi(argv[i + 1]);
    else if (a == "--waiting")
      o.waiting = std::atoi(argv[i + 1]);
    else if (a == "--dir")
      o.dir = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: bench_gpuq [--gpuq PATH] [--jobs N] [--waiting N] [--dir DIR]\n");
      return false;
    }
  }
  if (o.dir.empty()) {
    char tpl[] = "/tmp/gpuq-bench-XXXXXX";
    o.dir = mkdtemp(tpl);
  }
  std::filesystem::create_directories(o.dir);
  return true;
}

// A daemon on one GPU id with its state in dir, answering on `socket`; 0 when it cannot start.
pid_t start_daemon(const Options& o, const std::string& socket) {
  std::vector<std::string> args = {o.gpuq,          "daemon",         "--gpus",   "0",
                                   "--state-dir",   o.dir + "/state", "--socket", socket};
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  pid_t daemon = 0;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  std::string log = o.dir + "/daemon.log";
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (posix_spawn(&daemon, o.gpuq.c_str(), &fa, nullptr, av.data(), environ) != 0) return 0;
  for (int i = 0; i < 500; ++i) {
    try {
      request(socket, {{"op", "ping"}});
      break;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return daemon;
}

struct Results {
  std::vector<double> submit_ms, cli_ms, dispatch_ms, queue_ms, queue_json_ms, submit_busy_ms;
  std::vector<double> fsync_before_ms, fsync_after_ms;
  size_t listed = 0;
  double run_s = 0;
};

class Bench {
 public:
  Bench(const Options& o, std::string socket) : o_(o), socket_(std::move(socket)) {
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq != std::string::npos) env_[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    script_ = "#!/bin/bash\n#SBATCH --gres=gpu:1 -o /dev/null\n"
              "echo \"s $GPUQ_JOB_ID $EPOCHREALTIME\" >> " + stamps() + "\n"
              "echo \"e $GPUQ_JOB_ID $EPOCHREALTIME\" >> " + stamps() + "\n";
  }

  // 1. Submit latency (request round trip, durable commit included), queue drained so that
  //    dispatch does not interleave; then the same through the gpuq CLI process.
  void submits(Results& r) {
    request(socket_, {{"op", "drain"}});
    for (int i = 0; i < o_.jobs; ++i) {
      auto t0 = Clock::now();
      last_ = submit(i, {});
      r.submit_ms.push_back(ms_since(t0));
      if (i == 0) first_ = last_;
    }
    std::ofstream(o_.dir + "/cli.sh") << script_;
    for (int i = 0; i < 100; ++i) {
      auto t0 = Clock::now();
      if (run_cmd(fmt::format("cd {} && GPUQ_SOCKET={} {} submit --hold cli.sh >/dev/null",
                              o_.dir, socket_, o_.gpuq)) != 0)
        throw std::runtime_error("gpuq submit failed");
      r.cli_ms.push_back(ms_since(t0));
    }
  }

  // 2. Dispatch latency: release the drained queue on one GPU and let the jobs run back to back.
  void dispatches(Results& r) {
    auto t_run = Clock::now();
    request(socket_, {{"op", "resume"}});
    while (true) {
      auto q = request(socket_, {{"op", "show"}, {"ids", {std::to_string(last_)}}});
      std::string st = q["jobs"][0]["state"];
      if (st != "PENDING" && st != "RUNNING") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    r.run_s = ms_since(t_run) / 1000;
    std::map<int64_t, std::pair<double, double>> se;
    std::ifstream in(stamps());
    std::string kind;
    int64_t id;
    double t;
    while (in >> kind >> id >> t) (kind == "s" ? se[id].first : se[id].second) = t;
    for (int64_t j = first_ + 1; j <= last_; ++j)
      if (se.count(j) && se.count(j - 1))
        r.dispatch_ms.push_back((se[j].first - se[j - 1].second) * 1000);
  }

  // 3. `gpuq queue` with N jobs waiting (held, so nothing starts): submitted as arrays of 1,000;
  //    then submits into that queue.
  void listings(Results& r) {
    request(socket_, {{"op", "drain"}});
    for (int done = 0; done < o_.waiting; done += 1000) {
      int n = std::min(1000, o_.waiting - done);
      submit(1000000 + done, {"--hold", fmt::format("--array=0-{}", n - 1)});
    }
    r.listed = request(socket_, {{"op", "queue"}})["jobs"].size();
    for (int i = 0; i < 10; ++i) {
      auto t0 = Clock::now();
      run_cmd(fmt::format("GPUQ_SOCKET={} {} queue > /dev/null", socket_, o_.gpuq));
      r.queue_ms.push_back(ms_since(t0));
      t0 = Clock::now();
      run_cmd(fmt::format("GPUQ_SOCKET={} {} queue --json > /dev/null", socket_, o_.gpuq));
      r.queue_json_ms.push_back(ms_since(t0));
    }
    for (int i = 0; i < 200; ++i) {
      auto t0 = Clock::now();
      submit(2000000 + i, {"--hold"});
      r.submit_busy_ms.push_back(ms_since(t0));
    }
  }

 private:
  std::string stamps() const { return o_.dir + "/stamps.log"; }

  // As gpuq submit does: #SBATCH lines and options parsed here, the typed request sent.
  int64_t submit(int i, const std::vector<std::string>& options) {
    SubmitRequest req;
    req.script = script_;
    req.script_name = "bench.sh";
    req.cwd = o_.dir;
    req.env = env_;
    req.submit_key = fmt::format("bench-{}-{}", getpid(), i);
    req.job = parse_sbatch_script(script_);
    req.job.merge_from(parse_sbatch_options(options));
    return request(socket_, encode_submit(req))["job_id"].get<int64_t>();
  }

  const Options& o_;
  const std::string socket_;
  std::map<std::string, std::string> env_;
  std::string script_;
  int64_t first_ = 0, last_ = 0;
};

void report(const Options& o, const Results& r) {
  auto row = [](const std::string& what, const Stats& s, const char* target) {
    std::printf("| %s | %zu | %.2f | %.2f | %.2f | %s |\n", what.c_str(), s.n, s.median, s.p99,
                s.max, target);
  };
  std::printf("| measurement | samples | median ms | p99 ms | max ms | target |\n");
  std::printf("|---|---|---|---|---|---|\n");
  row("submit, request round trip (empty -> 1,000 queued)", stats(r.submit_ms), "<= 5 ms");
  row("submit, `gpuq submit` process wall time", stats(r.cli_ms), "-");
  row("dispatch, previous job's end -> next job's start", stats(r.dispatch_ms), "<= 50 ms");
  row(fmt::format("`gpuq queue`, {} jobs listed (process wall time)", r.listed),
      stats(r.queue_ms), "<= 200 ms");
  row(fmt::format("`gpuq queue --json`, {} jobs listed", r.listed), stats(r.queue_json_ms), "-");
  row(fmt::format("submit, request round trip with {} waiting", r.listed),
      stats(r.submit_busy_ms), "-");
  row("4 KiB write + fsync on the state dir's filesystem, before the run",
      stats(r.fsync_before_ms), "-");
  row("4 KiB write + fsync on the state dir's filesystem, after the run", stats(r.fsync_after_ms),
      "-");
  std::printf("\n%d jobs ran back to back on one GPU id in %.1f s.\n", o.jobs, r.run_s);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, o)) return 2;
  const std::string socket = o.dir + "/gpuq.sock";
  const pid_t daemon = start_daemon(o, socket);
  if (daemon == 0) {
    std::fprintf(stderr, "cannot start %s\n", o.gpuq.c_str());
    return 1;
  }
  Results r;
  Bench bench(o, socket);
  // The disk's own fsync latency, before and after the run: every submit and dispatch pays one
  // WAL fsync, so this is the floor under both (and explains noisy runs on a shared machine).
  r.fsync_before_ms = fsync_probe(o.dir);
  bench.submits(r);
  bench.dispatches(r);
  bench.listings(r);
  r.fsync_after_ms = fsync_probe(o.dir);
  kill(daemon, SIGTERM);
  int st;
  waitpid(daemon, &st, 0);
  std::error_code ec;
  std::filesystem::remove_all(o.dir, ec);
  report(o, r);
  return 0;
}

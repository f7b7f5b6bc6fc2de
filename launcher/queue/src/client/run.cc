// gpuq run and gpuq alloc (client.h): an interactive job, like srun and salloc. The job waits in
// the queue as any other; once it starts, its supervisor takes this process's terminal (or its
// standard input, output and error) over the attach socket (supervise/attach.h) and the relay
// (relay.h) runs until the job ends, whose exit status becomes ours.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "client/client.h"
#include "client/env.h"
#include "client/relay.h"
#include "gpurun/common/posix.h"
#include "gpurun/queue/format.h"
#include "gpurun/queue/sbatch.h"
#include "job/request.h"
#include "supervise/attach.h"

namespace gpurun::queue {

namespace {

constexpr const char* kRunUsage =
    "usage: gpuq run [OPTIONS] [--pty] [--] CMD [ARGS...]\n"
    "Runs CMD as a job, like srun: it waits in the queue as batch jobs do (fair share, limits,\n"
    "backfill), saying where it stands, then runs attached to this terminal: standard input,\n"
    "output and error, signals (Ctrl-C reaches CMD) and the exit status pass through. The job\n"
    "ends when CMD ends or when gpuq run goes away (killed, terminal closed); its GPUs are then\n"
    "free within seconds. It gets a batch job's environment (CUDA_VISIBLE_DEVICES, SLURM_JOB_ID,\n"
    "...), time limit and accounting (gpuq history).\n\n"
    "  --pty          run CMD on a terminal of its own (an interactive shell: job control,\n"
    "                 window size); standard input must be a terminal\n"
    "  --socket PATH  the daemon's socket\n"
    "Options (sbatch's, as gpuq submit takes them): --gres=gpu[:type]:N|shard:K, -G/--gpus N,\n"
    "  -t/--time TIME, -J/--job-name NAME, -D/--chdir DIR, -d/--dependency, --priority N,\n"
    "  -A/--account NAME, -c/--cpus-per-task N, --signal, --mail-type, --mail-user\n"
    "Exit status: CMD's, 128 + the signal that ended it, or 1 when the job did not run.";

constexpr const char* kAllocUsage =
    "usage: gpuq alloc [OPTIONS] [--] [CMD [ARGS...]]\n"
    "Holds GPUs for an interactive session, like salloc: once the job starts, CMD (default:\n"
    "your $SHELL) runs in it with the job's environment (CUDA_VISIBLE_DEVICES, SLURM_JOB_ID,\n"
    "...), on a terminal of its own when standard input is one. The GPUs are held until CMD\n"
    "exits. Options: as gpuq run's (gpuq run --help).";

struct RunArgs {
  JobRequest job;
  std::vector<std::string> cmd;
  std::string socket;
  bool pty = false;
  bool help = false;
};

// How many words the sbatch option at a[i] takes (1 or 2), or 0 when a[i] is the command.
// An option alone, else with the next word as its value (whose absence is then the error).
size_t option_words(const Args& a, size_t i) {
  size_t pos = 0;
  try {
    parse_sbatch_options({a[i]}, &pos, UnknownOptions::kRefuse);
    return pos;
  } catch (const std::exception&) {
    if (i + 1 >= a.size()) throw;
  }
  parse_sbatch_options({a[i], a[i + 1]}, &pos, UnknownOptions::kRefuse);
  return pos;
}

RunArgs parse_run_args(const Args& a) {
  RunArgs r;
  r.socket = default_socket_path();
  std::vector<std::string> options;
  size_t i = 0;
  while (i < a.size()) {
    const std::string& w = a[i];
    if (w == "--") {
      ++i;
      break;
    }
    if (w == "-h" || w == "--help") r.help = true, ++i;
    else if (w == "--pty") r.pty = true, ++i;
    else if (w == "--socket" && i + 1 < a.size()) r.socket = a[i + 1], i += 2;
    else if (w.rfind("--socket=", 0) == 0) r.socket = w.substr(9), ++i;
    else if (const size_t n = option_words(a, i); n > 0)
      options.insert(options.end(), a.begin() + long(i), a.begin() + long(i + n)), i += n;
    else
      break;
  }
  r.cmd.assign(a.begin() + long(i), a.end());
  r.job = parse_sbatch_options(options, nullptr, UnknownOptions::kRefuse);
  r.job.resolve_gpus_per_task();
  if (r.job.array)
    throw std::invalid_argument("gpuq run starts one job: --array is for gpuq submit");
  return r;
}

SubmitRequest run_request(const RunArgs& r, const AttachSpec& attach) {
  SubmitRequest req;
  req.script = "#!/bin/sh\nexec \"$@\"\n";  // CMD and its arguments are the script's arguments
  req.script_name = r.cmd.front();
  req.args = r.cmd;
  char cwd[4096];
  if (!getcwd(cwd, sizeof(cwd))) throw std::runtime_error("cannot determine the current directory");
  req.cwd = cwd;
  req.env = queue_env().all;
  req.job = r.job;
  req.job.apply_export(req.env, my_user_name());
  require_utf8_text(req, req.script_name);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  req.umask = mask;
  req.submit_key = random_hex(16);
  req.attach = attach;
  return req;
}

// One line on stderr each time where the job stands changes: squeue's reason, its place in the
// order and the backfill's expected start.
std::string standing(int64_t id, const nlohmann::json& j) {
  std::string line = fmt::format("gpuq: job {} queued", id);
  if (j.value("position", 0) > 0) line += fmt::format(": position {}", j["position"].get<int>());
  line += fmt::format(" ({})", j.value("reason", std::string("None")));
  const int64_t at = j.value("expected_start_ms", int64_t{0});
  if (at > 0) line += ", expected start " + local_time(at);
  return line;
}

// Cancels the job (Ctrl-C or a termination signal while it waits) and says so.
int give_up(const std::string& socket, int64_t id, int sig) {
  call(socket, {{"op", "cancel"}, {"ids", {std::to_string(id)}}});
  fmt::print(stderr, "gpuq: job {} cancelled ({} while it waited)\n", id,
             common::signal_name(sig));
  return 128 + sig;
}

// Waits for the supervisor, reporting the job's standing; the connection, or the exit status
// when the job ended (or was cancelled) before it started.
std::variant<Fd, int> wait_for_start(const std::string& socket, int64_t id,
                                     const AttachListener& l, int sigfd,
                                     const std::vector<int>& stdio) {
  std::string said;
  while (true) {
    pollfd p[2] = {{l.fd.get(), POLLIN, 0}, {sigfd, POLLIN, 0}};
    ::poll(p, 2, 1000);
    signalfd_siginfo si{};
    while (::read(sigfd, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si)))
      if (si.ssi_signo != SIGWINCH) return give_up(socket, id, int(si.ssi_signo));
    if (p[0].revents & POLLIN) {
      Fd conn = accept_supervisor(l, id, stdio, 100);
      if (conn) {
        if (!said.empty()) fmt::print(stderr, "gpuq: job {} has been allocated resources\n", id);
        return conn;
      }
    }
    nlohmann::json jobs;
    try {
      jobs = call(socket, {{"op", "show"}, {"ids", {std::to_string(id)}}, {"brief", true}})["jobs"];
    } catch (const std::invalid_argument&) {
      throw;
    } catch (const std::exception&) {  // a daemon restarting: the job keeps its place
      continue;
    }
    if (jobs.empty()) throw std::runtime_error(fmt::format("job {} is gone from the queue", id));
    const nlohmann::json& j = jobs.front();
    const std::string state = j["state"].get<std::string>();
    if (state != "PENDING" && state != "RUNNING") {
      fmt::print(stderr, "gpuq: job {} ended before it started: {} ({})\n", id, state,
                 j.value("reason", std::string()));
      return 1;
    }
    if (state == "PENDING" && standing(id, j) != said)
      fmt::print(stderr, "{}\n", said = standing(id, j));
  }
}

// After the session: the exit status the supervisor sent, else the one the daemon recorded.
int final_status(const std::string& socket, int64_t id, std::optional<int> said) {
  if (said) return *said;
  const int status = wait_for_job(socket, id);
  fmt::print(stderr, "gpuq: job {} ended without its supervisor saying how\n", id);
  return status;
}

int run_job(const RunArgs& r) {
  if (r.pty && !isatty(STDIN_FILENO))
    throw std::invalid_argument(
        "--pty needs a terminal on standard input, and this one is not: run without --pty to "
        "pass standard input, output and the exit status through");
  Fd sigfd = block_client_signals();
  AttachListener l = listen_attach(r.pty);
  std::optional<Pty> pty;
  if (r.pty) pty = open_pty();
  const std::vector<int> stdio = pty ? std::vector<int>(3, pty->slave.get())
                                     : std::vector<int>{STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO};
  const int64_t id = call(r.socket, encode_submit(run_request(r, l.spec)))["job_id"];
  auto started = wait_for_start(r.socket, id, l, sigfd.get(), stdio);
  if (auto* status = std::get_if<int>(&started)) return *status;
  Fd conn = std::move(std::get<Fd>(started));
  if (pty) pty->slave.reset();  // the job's now: its end reads as the terminal's hang-up
  std::optional<RawTerminal> raw;
  if (pty) raw.emplace();
  auto said = relay_session(conn.get(), sigfd.get(), pty ? pty->master.get() : -1);
  raw.reset();
  return final_status(r.socket, id, said);
}

}  // namespace

int cmd_run(const Args& a) {
  RunArgs r = parse_run_args(a);
  if (r.help) {
    std::cout << kRunUsage << "\n";
    return 0;
  }
  if (r.cmd.empty()) throw std::invalid_argument("gpuq run: no command given (gpuq run --help)");
  return run_job(r);
}

int cmd_alloc(const Args& a) {
  RunArgs r = parse_run_args(a);
  if (r.help) {
    std::cout << kAllocUsage << "\n";
    return 0;
  }
  if (r.cmd.empty()) r.cmd = {queue_env().shell.value_or("/bin/sh")};
  r.pty = r.pty || isatty(STDIN_FILENO);
  return run_job(r);
}

}  // namespace gpurun::queue

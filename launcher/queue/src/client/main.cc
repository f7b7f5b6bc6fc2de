// gpuq: a job queue for one multi-GPU workstation. `gpuq --help` lists the subcommands; the
// daemon is `gpuq daemon`, and `gpuq __supervise` is the per-job supervisor it starts (internal).
// The only place where errors become exit codes.
#include <fmt/format.h>

#include <boost/program_options/errors.hpp>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "client/client.h"
#include "gpurun_version.h"
#include "supervise/job_supervisor.h"

namespace {

constexpr const char* kUsage =
    "usage: gpuq [--socket PATH] COMMAND [OPTIONS]   (gpuq COMMAND --help for each)\n\n"
    "  submit [OPTIONS] SCRIPT [ARGS]  submit an sbatch script (#SBATCH lines honoured)\n"
    "  run [OPTIONS] [--pty] -- CMD    run CMD as a job, attached to this terminal (like srun)\n"
    "  alloc [OPTIONS] [CMD]           hold GPUs for a shell in the job (like salloc)\n"
    "  queue                           pending and running jobs (squeue columns)\n"
    "  cancel [--signal SIG] [ID...]   cancel or signal jobs (-u USER, --me, -t PD,R)\n"
    "  show ID                         one job in detail\n"
    "  log [-f] ID                     a job's output\n"
    "  history                         finished jobs (sacct columns)\n"
    "  stats ID [--csv|--plot F.png]   what a job used (like seff)\n"
    "  report [--since T] [--by user]  GPU usage per user or account (like sreport)\n"
    "  budget [set|clear] [SUBJECT]    GPU-hour budgets: spent, left; set one (root)\n"
    "  web [--listen 127.0.0.1:8080]   read-only status page, /api/status, /metrics\n"
    "  hold ID... | release ID...      keep pending jobs from starting / let them start\n"
    "  requeue ID...                   stop running jobs and queue them again (like scontrol)\n"
    "  drain | resume                  stop starting jobs / start again (root)\n"
    "  daemon [--gpus 0,1,...]         run the queue\n"
    "  srun [-n N] [-l] CMD            inside a job: its tasks, as srun runs a step (the job's\n"
    "                                  PATH has `srun` as this command)\n"
    "  --version                       print the version\n";

int dispatch(const std::string& cmd, const std::vector<std::string>& args) {
  using namespace gpurun::queue;
  if (cmd == "submit") return cmd_submit(args);
  if (cmd == "run") return cmd_run(args);
  if (cmd == "alloc") return cmd_alloc(args);
  if (cmd == "queue") return cmd_queue(args);
  if (cmd == "cancel") return cmd_cancel(args);
  if (cmd == "show") return cmd_show(args);
  if (cmd == "log") return cmd_log(args);
  if (cmd == "history") return cmd_history(args);
  if (cmd == "stats") return cmd_stats(args);
  if (cmd == "report") return cmd_report(args);
  if (cmd == "budget") return cmd_budget(args);
  if (cmd == "web") return cmd_web(args);
  if (cmd == "hold") return cmd_hold(args, true);
  if (cmd == "release") return cmd_hold(args, false);
  if (cmd == "requeue") return cmd_requeue(args);
  if (cmd == "drain") return cmd_drain(args, true);
  if (cmd == "resume") return cmd_drain(args, false);
  if (cmd == "daemon") return cmd_daemon(args);
  if (cmd == "srun") return cmd_srun(args);
  std::cerr << "gpuq: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string self = argv[0];
  if (self == "srun" || (self.size() > 5 && self.compare(self.size() - 5, 5, "/srun") == 0)) {
    try {  // called as srun: STATE/bin/srun in a job's PATH
      return gpurun::queue::cmd_srun(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const std::exception& e) {
      fmt::print(stderr, "{}\n", e.what());
      return 1;
    }
  }
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  // `gpuq --socket PATH COMMAND ...`: the option is the command's, as after it.
  std::vector<std::string> lead;
  int first = 1;
  while (first < argc && std::string(argv[first]).rfind("--socket", 0) == 0) {
    const std::string opt = argv[first++];
    lead.push_back(opt);
    if (opt == "--socket" && first < argc) lead.push_back(argv[first++]);
  }
  if (first >= argc) {
    std::cerr << "gpuq: no command given after --socket\n" << kUsage;
    return 2;
  }
  std::string cmd = argv[first];
  if (cmd == "--version") {
    std::cout << gpurun::common::version_line("gpuq") << "\n";
    return 0;
  }
  std::vector<std::string> args = lead;
  args.insert(args.end(), argv + first + 1, argv + argc);
  if (cmd == "__supervise") {
    if (args.size() != 3) return 2;
    try {
      return gpurun::queue::run_supervisor(args[0], std::stoll(args[1]), std::stoi(args[2]));
    } catch (const std::exception& e) {
      // The daemon sees the supervisor exit without a final status and handles the job.
      fmt::print(stderr, "gpuq supervisor for job {}: {}\n", args[1], e.what());
      return 1;
    }
  }
  try {
    return dispatch(cmd, args);
  } catch (const boost::program_options::error& e) {
    fmt::print(stderr, "gpuq {}: {} (see gpuq {} --help)\n", cmd, e.what(), cmd);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpuq: error: {}\n", e.what());
    return 1;
  }
}

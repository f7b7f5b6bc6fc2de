// main.cc: the `gpurun` command. Subcommands: (launch) `gpurun [OPTIONS] -- PROGRAM [ARGS]`,
// `gpurun info`, `gpurun hostlist expand|compress`, and the hidden `gpurun _rank` wrapper that
// every rank runs. The only place where errors become exit codes.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <iostream>
#include <sstream>

#include "sys/cpubind.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/terminal.h"
#include "gpurun/launcher/error.h"
#include "gpurun/launcher/hostlist.h"
#include "gpurun/launcher/launch.h"
#include "gpurun/launcher/plan.h"
#include "gpurun_version.h"
#include "monitor/monitor.h"
#include "sys/proc_util.h"
#include "control/rank_table.h"
#include "cli/info_report.h"
#include "cli/run.h"
#include "sys/system.h"

namespace po = boost::program_options;
using namespace gpurun::launcher;
namespace proc = gpurun::launcher::proc;

namespace {

// An error as one line (and an Error's detail lines under it), control characters escaped: its
// text holds host names, paths and values from the environment, and goes to a terminal.
void print_error(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  const std::string detail = err && !err->detail().empty()
                                 ? "\n" + gpurun::common::escape_control_keep_lines(err->detail())
                                 : "";
  fmt::print(stderr, "gpurun: {}{}\n", gpurun::common::escape_control(e.what()), detail);
}

constexpr const char* kUsage =
    R"(gpurun: launch data-parallel programs on the GPUs and nodes of a job

usage:
  gpurun [OPTIONS] [--] PROGRAM [ARGS...]   launch PROGRAM once per rank
  gpurun info [--json] [--env-file FILE] [PLAN OPTIONS]
                                            show the allocation and the rank plan
  gpurun hostlist expand EXPR...            Slurm hostlist -> one host a line
  gpurun hostlist compress HOST...          hosts -> Slurm hostlist
  gpurun hostlist tasks EXPR...             Slurm tasks per node -> one count a line

The scheduler (Slurm, PBS Pro/Torque, LSF, gpuq, or none) is read from the environment; ranks
start through its engine (srun, mpirun, mpirun+blaunch, jsrun, pbsdsh). Every rank gets RANK
WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR MASTER_PORT CUDA_VISIBLE_DEVICES
CUDA_DEVICE_ORDER OMP_NUM_THREADS GPURUN_SCHEDULER GPURUN_JOB_ID. When one rank fails, all stop.
)";

// Prints options as Boost does ("  -n [ --ntasks ] arg   total ranks ..."), but with at least two
// blanks before every description and lines broken only between words. help2man takes two
// blanks as the end of an option, and the man page and the bash completion are read from this
// help (packaging/): Boost left one blank after its longest option and broke a long word at the
// line's end, which garbled gpurun(1)'s --monitor and --container-runtime entries.
void print_options(std::ostream& os, const std::string& caption, const po::options_description& d) {
  constexpr std::size_t kWidth = 80, kMaxColumn = 34;
  const auto name_of = [](const po::option_description& o) {
    const std::string p = o.format_parameter();
    return "  " + o.format_name() + (p.empty() ? "" : " " + p);
  };
  std::size_t column = 0;
  for (const auto& o : d.options()) column = std::max(column, name_of(*o).size() + 2);
  column = std::min(column, kMaxColumn);
  os << caption << ":\n";
  for (const auto& o : d.options()) {
    std::string line = name_of(*o);
    if (line.size() + 2 > column) {  // too long: the description starts on the next line
      os << line << "\n";
      line.clear();
    }
    line.resize(column, ' ');
    std::istringstream words(o->description());
    bool first = true;
    for (std::string w; words >> w; first = false) {
      if (!first && line.size() + 1 + w.size() > kWidth) {
        os << line << "\n";
        line.assign(column, ' ');
        first = true;
      }
      line += (first ? "" : " ") + w;
    }
    os << line << "\n";
  }
}

struct Cli {
  po::options_description plan{"plan options"};
  po::options_description launch{"launch options"};
  po::options_description info{"info options"};
};

void add_plan_options(po::options_description& d) {
  d.add_options()("ntasks,n", po::value<int>(),
                  "total ranks (default: the allocation's task slots; 1 GPU per rank locally)")(
      "nproc-per-node", po::value<std::string>()->default_value("auto"),
      "ranks per node: N, gpu (one per GPU) or auto")(
      "nnodes", po::value<std::string>()->value_name("MIN:MAX"),
      "run on at most MAX of the allocation's nodes; a node that fails its preflight, or dies "
      "while --max-restarts remain, is left out and the job goes on (WORLD_SIZE recomputed) "
      "while at least MIN nodes are left; N means N:N")(
      "gpus-per-rank", po::value<int>(), "GPUs each rank gets (default 1 where GPUs exist)")(
      "cpus-per-rank", po::value<int>(),
      "OMP_NUM_THREADS of each rank (default: from the scheduler)")(
      "scheduler", po::value<std::string>()->default_value("auto"),
      "auto|slurm|pbs|lsf|gpuq|local")(
      "master-port", po::value<int>(),
      "rendezvous port (default: derived from the job id, checked free)")(
      "master-addr", po::value<std::string>(), "rendezvous host (default: rank 0's host)")(
      "contract", po::value<std::string>()->default_value("torch,tf,jax"),
      "which frameworks' variables each rank gets: torch (MASTER_ADDR...), tf (TF_CONFIG), jax "
      "(JAX_COORDINATOR_ADDRESS...), comma-separated")(
      "env-file", po::value<std::string>(),
      "read KEY=VALUE lines as the whole environment (explain any job)");
}

PlanOptions plan_options(const po::variables_map& vm) {
  PlanOptions o;
  if (vm.count("ntasks")) o.ntasks = vm["ntasks"].as<int>();
  if (vm.count("nnodes")) o.nnodes = parse_nnodes(vm["nnodes"].as<std::string>());
  parse_nproc_per_node(vm["nproc-per-node"].as<std::string>(), o);
  o.contracts = parse_contracts(vm["contract"].as<std::string>());
  o.contracts_given = !vm["contract"].defaulted();
  if (vm.count("gpus-per-rank")) o.gpus_per_rank = vm["gpus-per-rank"].as<int>();
  if (vm.count("cpus-per-rank")) o.cpus_per_rank = vm["cpus-per-rank"].as<int>();
  if (vm.count("master-port")) {
    int p = vm["master-port"].as<int>();
    if (p < 1 || p > 65535) throw Error(fmt::format("--master-port {}: expected 1-65535", p));
    o.master_port = p;
  }
  return o;
}

struct Setup {
  Env env;
  bool from_file = false;
  Allocation alloc;
  PlanOptions popts;
  RankPlan plan;
};

Setup setup(const po::variables_map& vm) {
  Setup s;
  if (vm.count("env-file")) {
    s.env = sys::read_env_file(vm["env-file"].as<std::string>());
    s.from_file = true;
  } else {
    s.env = sys::process_env();
  }
  DetectInput in = sys::detect_input(s.env);
  if (s.from_file) {
    // Explaining someone else's job: this machine's CPUs and GPUs are not theirs.
    in.hostname = "localhost";
    in.cpu_count = 1;
    in.device_gpu_count = 0;
    in.slurm_job_details = nullptr;  // nor is this machine's scontrol
  }
  std::string sched = vm["scheduler"].as<std::string>();
  std::optional<Scheduler> forced;
  if (sched != "auto") forced = parse_scheduler(sched, "--scheduler");
  s.alloc = detect_allocation(in, forced);
  s.popts = plan_options(vm);
  if (!s.popts.master_port && !s.alloc.job_id && !s.from_file) {
    // No job id to derive from: two local launches at once must not pick the same port.
    s.popts.master_port = derive_master_port(fmt::format("local:{}", getpid()));
    s.plan = make_plan(s.alloc, s.popts);
    s.popts.master_port.reset();
  } else {
    s.plan = make_plan(s.alloc, s.popts);
  }
  if (vm.count("master-addr")) s.plan.master_addr = vm["master-addr"].as<std::string>();
  return s;
}

int cmd_info(const std::vector<std::string>& args) {
  constexpr const char* kInfoUsage = "gpurun info [--json] [--env-file FILE] [PLAN OPTIONS]";
  po::options_description d(kInfoUsage);
  add_plan_options(d);
  d.add_options()("json", "print JSON")("help,h", "this help");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(d).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    print_options(std::cout, kInfoUsage, d);
    return 0;
  }
  Setup s = setup(vm);
  if (vm.count("json"))
    // JSON escapes control characters; bytes that are no UTF-8 become U+FFFD.
    std::cout
        << info_json(s.alloc, s.plan).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
        << "\n";
  else
    std::cout << info_text(s.alloc, s.plan);
  return 0;
}

int cmd_hostlist(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << "usage: gpurun hostlist expand EXPR...    (one host a line)\n"
                 "       gpurun hostlist compress HOST...  (one hostlist expression)\n"
                 "       gpurun hostlist tasks EXPR...     (Slurm tasks-per-node, e.g. 2(x3),1)\n";
    return args.empty() ? 2 : 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (rest.empty())
    throw Error(fmt::format("gpurun hostlist {}: expected at least one argument", args[0]));
  try {
    if (args[0] == "expand") {
      std::string out;
      for (const auto& e : rest) {
        if (e.find_first_not_of(" \t\n,") == std::string::npos)
          throw Error(
              fmt::format("hostlist '{}' is empty: expected something like node[01-04]", e));
        for (const auto& h : expand_hostlist(e)) out += gpurun::common::escape_control(h) + "\n";
      }
      std::cout << out;
    } else if (args[0] == "compress") {
      std::vector<std::string> hosts;
      for (const auto& a : rest)
        for (const auto& h : expand_hostlist(a)) hosts.push_back(h);
      std::cout << gpurun::common::escape_control(compress_hostlist(hosts)) << "\n";
    } else if (args[0] == "tasks") {
      for (const auto& e : rest)
        for (int n : expand_tasks_per_node(e)) std::cout << n << "\n";
    } else {
      throw Error(fmt::format("gpurun hostlist '{}': expected expand, compress or tasks", args[0]));
    }
  } catch (const HostlistError& e) {
    print_error(e);
    return 2;
  }
  return 0;
}

// "USR1", "SIGUSR1" or "10"; throws Error naming `what`.
int parse_signal(const std::string& text, const std::string& what) {
  if (auto sig = gpurun::common::parse_signal(text)) return *sig;
  throw Error(fmt::format("{} '{}': expected a signal such as USR1, SIGTERM or 10", what, text));
}

po::options_description launch_options() {
  po::options_description d("options");
  add_plan_options(d);
  d.add_options()("launcher", po::value<std::string>()->default_value("auto"),
                  "auto|srun|mpirun|blaunch|jsrun|pbsdsh|local")(
      "launcher-args", po::value<std::string>(), "extra arguments for the engine, split on blanks")(
      "dry-run",
      "print the engine command (runnable as printed: --control none, the ranks then unwatched) "
      "and every variable each rank gets; run nothing")("tag-output",
                                                        "prefix every output line with its rank")(
      "start-timeout", po::value<double>()->default_value(300), "seconds for all ranks to start")(
      "kill-grace", po::value<double>()->default_value(5),
      "seconds from TERM to KILL when stopping after a failure")(
      "stop-timeout", po::value<double>()->default_value(25),
      "seconds ranks get to exit after a forwarded SIGINT/SIGTERM")(
      "time-left", po::value<double>(),
      "seconds until the job ends (default: from SLURM_JOB_END_TIME)")(
      "checkpoint-before", po::value<double>()->default_value(0),
      "send --checkpoint-signal this many seconds before the job ends")(
      "checkpoint-signal", po::value<std::string>()->default_value("USR1"),
      "signal that asks ranks to checkpoint")(
      "control-addr", po::value<std::string>(),
      "address ranks use to reach gpurun (default: this host's name)")(
      "requeue",
      "after a checkpoint signal (USR1/USR2, --checkpoint-before) and a clean exit of every rank, "
      "requeue the job (scontrol requeue, qrerun, brequeue) so it resumes")(
      "hang-timeout", po::value<double>()->default_value(0),
      "seconds: when no rank makes progress (a heartbeat or output) for this long, or one "
      "rank's step stays behind the others' without advancing for this long, the job hangs: "
      "every rank's stacks are saved and the job stops (0: off)")(
      "max-restarts", po::value<int>()->default_value(0),
      "restart all ranks this many times in all when one fails after every rank started")(
      "output-dir", po::value<std::string>(),
      "also write each rank's stdout/stderr to DIR/rank-N.out/.err (and a hang's stacks); with "
      "--max-restarts each attempt starts with a line '==> attempt K <=='")(
      "monitor", po::value<std::string>()->implicit_value("1")->value_name("SECONDS"),
      "sample the job's GPUs on every node every SECONDS (default 1) into FILE.csv, the word "
      "after the option (--monitor=0.5 gpus.csv), one row per GPU and sample with the columns "
      "time, node, rank, gpu, util, mem_used_mib, power_w, temp_c; at the end one line per "
      "node, and GPUs under half the job's median utilisation named")(
      "preflight", po::value<std::string>()->default_value("fail"),
      "off|warn|fail: before any program starts, each node's first rank checks the node: the "
      "GPUs the plan gave it are there, with no uncorrected ECC error, no page retirement or row "
      "remap pending and none fallen off the bus (NVML or nvidia-smi), and TMPDIR has room. "
      "fail (default) names each failing node and starts no program, since a job started on a "
      "bad GPU wastes its allocation or hangs in NCCL; warn names them and starts; a check that "
      "cannot run (no NVML, no nvidia-smi) is only said")(
      "preflight-min-tmp", po::value<std::string>()->default_value("1G"),
      "SIZE (K, M, G, T: binary) that TMPDIR (else /tmp) must have free on every node; 0: not "
      "checked")(
      "preflight-bandwidth",
      "also time an exchange of 8 MiB each way between each node and rank 0's node over the "
      "rendezvous network: one figure per node, and a link under a quarter of the median named")(
      "cpu-bind", po::value<std::string>()->default_value("none"),
      "auto|none|LIST: auto puts each rank on the CPUs next to its GPU; LIST is one CPU list "
      "per local rank, 0-3:4-7")(
      "container", po::value<std::string>(),
      "run each rank inside IMAGE: apptainer exec --nv, or podman run with only the rank's GPUs "
      "(CDI), the rank's variables and the working folder; under Slurm with pyxis, srun runs "
      "each task in IMAGE (gpurun must be in the image)")(
      "container-runtime", po::value<std::string>()->default_value("auto"),
      "auto|apptainer|podman|pyxis: auto takes pyxis when srun has it, else apptainer, else "
      "podman, whichever is on PATH")("quiet,q",
                                      "no gpurun: status lines (failures are still reported)")(
      "version", "print the version")("help,h", "this help");
  return d;
}

// --monitor[=SECONDS] FILE.csv: FILE.csv is the word after the option, passed on to the parser
// as the hidden --monitor-file.
constexpr const char* kMonitorFile = "monitor-file";

bool take_monitor_file(const std::vector<std::string>& args, std::size_t& i,
                       std::vector<std::string>& opts) {
  const std::string& a = args[i];
  if (a != "--monitor" && a.rfind("--monitor=", 0) != 0) return false;
  opts.push_back(a);
  if (i + 1 >= args.size() || args[i + 1].empty() || args[i + 1][0] == '-')
    throw Error(fmt::format("{}: expected FILE.csv after it (--monitor[=SECONDS] FILE.csv){}", a,
                            i + 1 < args.size() ? ", not '" + args[i + 1] + "'" : ""));
  opts.push_back(fmt::format("--{}={}", kMonitorFile, args[++i]));
  return true;
}

// Seconds between --monitor samples: a number from 0.1 to 3600.
double monitor_interval(const std::string& text) {
  char* end = nullptr;
  double s = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(s >= 0.1 && s <= 3600))
    throw Error(fmt::format(
        "--monitor={}: expected SECONDS between samples, a number from 0.1 to 3600 (as in "
        "--monitor=0.5 FILE.csv)",
        text));
  return s;
}

// Splits gpurun's options from PROGRAM ARGS: `gpurun -n 2 python train.py` has no "--", so the
// first word that is neither an option nor an option's value starts the program.
std::pair<std::vector<std::string>, std::vector<std::string>> split_program(
    const po::options_description& d, const std::vector<std::string>& args) {
  std::vector<std::string> opts, program;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      program.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (a.empty() || a[0] != '-') {
      program.assign(args.begin() + static_cast<long>(i), args.end());
      break;
    }
    if (take_monitor_file(args, i, opts)) continue;
    opts.push_back(a);
    bool is_long = a.rfind("--", 0) == 0;
    const po::option_description* o = a.find('=') != std::string::npos ? nullptr
                                      : is_long ? d.find_nothrow(a.substr(2), false)
                                                : d.find_nothrow(a, false);
    if (o && o->semantic()->max_tokens() > 0 && i + 1 < args.size()) opts.push_back(args[++i]);
  }
  return {opts, program};
}

// --container: the image, the runtime asked for, whether srun has pyxis, the working folder.
void container_settings(const po::variables_map& vm, const Setup& s, bool via_srun,
                        LaunchOptions& lo) {
  lo.container_runtime = vm["container-runtime"].as<std::string>();
  if (!vm.count("container")) return;
  lo.container_image = vm["container"].as<std::string>();
  if (lo.container_image.empty()) throw Error("--container '': expected an image");
  if (via_srun && (lo.container_runtime == "auto" || lo.container_runtime == "pyxis"))
    if (auto srun = lo.find_tool("srun")) lo.srun_pyxis = sys::srun_has_pyxis(*srun);
  // Explaining someone else's job: their folder, not ours.
  auto pwd = s.env.find("PWD");
  lo.workdir = !s.from_file ? sys::current_dir() : pwd != s.env.end() ? pwd->second : "<cwd>";
}

LaunchOptions launch_settings(const po::variables_map& vm, const Setup& s,
                              const std::vector<std::string>& program) {
  LaunchOptions lo;
  lo.launcher = vm["launcher"].as<std::string>();
  if (vm.count("launcher-args")) {
    std::istringstream is(vm["launcher-args"].as<std::string>());
    std::string w;
    while (is >> w) lo.launcher_args.push_back(w);
  }
  lo.tag_output = vm.count("tag-output") > 0;
  lo.cpu_bind = vm["cpu-bind"].as<std::string>();
  cpubind::check_spec(lo.cpu_bind);
  lo.program = program;
  if (auto p = s.env.find("PATH"); p != s.env.end()) lo.user_path = p->second;
  if (auto l = s.env.find("LD_LIBRARY_PATH"); l != s.env.end()) lo.user_ld_library_path = l->second;
  lo.as_root = geteuid() == 0 && !s.from_file;  // an --env-file job is not ours to run
  Env tool_env = s.env;
  lo.find_tool = [tool_env](const std::string& t) { return sys::find_tool(tool_env, t); };
  // Its absolute path, --dry-run too: the printed command then runs where gpurun is not on PATH.
  lo.self_exe = sys::self_exe();
  bool via_srun = s.alloc.scheduler == Scheduler::slurm && !s.alloc.step_task &&
                  (lo.launcher == "auto" || lo.launcher == "srun");
  if (via_srun)
    if (auto srun = lo.find_tool("srun")) lo.srun_mpi_plugins = sys::srun_mpi_plugins(*srun);
  container_settings(vm, s, via_srun, lo);
  return lo;
}

enum class Zero { kAllowed, kRefused };

// A duration option's seconds: finite, from 0 (more than 0 with Zero::kRefused) to 10^8 (three
// years: the wrappers' plan carries them in milliseconds).
double seconds(const po::variables_map& vm, const char* name, Zero zero) {
  const double v = vm[name].as<double>();
  const bool positive = zero == Zero::kRefused;
  if (!std::isfinite(v) || v < 0 || (positive && v == 0) || v > 1e8)
    throw Error(fmt::format("--{} {}: expected seconds {} and at most 100000000", name, v,
                            positive ? "> 0" : ">= 0"));
  return v;
}

// --preflight, --preflight-min-tmp, --preflight-bandwidth.
void preflight_settings(const po::variables_map& vm, RunConfig& cfg) {
  const std::string& mode = vm["preflight"].as<std::string>();
  auto m = parse_preflight_mode(mode);
  if (!m) throw Error(fmt::format("--preflight '{}': expected off, warn or fail", mode));
  cfg.preflight = *m;
  const std::string& tmp = vm["preflight-min-tmp"].as<std::string>();
  auto bytes = parse_size(tmp);
  if (!bytes)
    throw Error(fmt::format(
        "--preflight-min-tmp '{}': expected a size such as 1G, 512M or 0 (no check)", tmp));
  cfg.preflight_min_tmp = *bytes;
  cfg.preflight_bandwidth = vm.count("preflight-bandwidth") > 0;
  if (cfg.preflight_bandwidth && cfg.preflight == PreflightMode::off)
    throw Error("--preflight-bandwidth needs --preflight warn or fail, not off");
}

RunConfig run_settings(const po::variables_map& vm, const Setup& s, const LaunchOptions& lo) {
  RunConfig cfg;
  cfg.alloc = s.alloc;
  cfg.plan = s.plan;
  cfg.plan_options = s.popts;
  cfg.launch = lo;
  cfg.env = s.env;
  cfg.start_timeout = seconds(vm, "start-timeout", Zero::kRefused);
  cfg.kill_grace = seconds(vm, "kill-grace", Zero::kAllowed);
  cfg.stop_timeout = seconds(vm, "stop-timeout", Zero::kAllowed);
  if (vm.count("time-left")) cfg.time_left = seconds(vm, "time-left", Zero::kAllowed);
  cfg.checkpoint_before = seconds(vm, "checkpoint-before", Zero::kAllowed);
  cfg.checkpoint_signal =
      parse_signal(vm["checkpoint-signal"].as<std::string>(), "--checkpoint-signal");
  if (vm.count("control-addr")) cfg.control_addr = vm["control-addr"].as<std::string>();
  cfg.quiet = vm.count("quiet") > 0;
  cfg.requeue = vm.count("requeue") > 0;
  cfg.hang_timeout = seconds(vm, "hang-timeout", Zero::kAllowed);  // 0: off
  cfg.max_restarts = vm["max-restarts"].as<int>();
  if (cfg.max_restarts < 0) throw Error("--max-restarts: expected 0 or more");
  if (vm.count("output-dir")) cfg.output_dir = vm["output-dir"].as<std::string>();
  cfg.cpu_bind = lo.cpu_bind;
  if (vm.count("monitor")) {
    cfg.monitor_interval = monitor_interval(vm["monitor"].as<std::string>());
    cfg.monitor_file = vm[kMonitorFile].as<std::string>();
  }
  preflight_settings(vm, cfg);
  return cfg;
}

int cmd_launch(const std::vector<std::string>& args) {
  po::options_description d = launch_options(), all;
  all.add(d).add_options()(kMonitorFile, po::value<std::string>());  // from --monitor's FILE.csv
  auto [opts, program] = split_program(d, args);
  po::variables_map vm;
  po::store(po::command_line_parser(opts).options(all).run(), vm);
  po::notify(vm);
  if (vm.count("help") || args.empty()) {
    std::cout << kUsage << "\n";
    print_options(std::cout, "options", d);
    return args.empty() ? 2 : 0;
  }
  if (vm.count("version")) {
    std::cout << gpurun::common::version_line("gpurun") << "\n";
    return 0;
  }
  if (program.empty())
    throw Error("no program to launch: usage: gpurun [OPTIONS] -- PROGRAM [ARGS...]");
  Setup s = setup(vm);
  bool dry = vm.count("dry-run") > 0 || s.from_file;
  LaunchOptions lo = launch_settings(vm, s, program);
  if (dry) {
    // The run's own options are checked as a real launch would, FILE.csv without writing it.
    RunConfig cfg = run_settings(vm, s, lo);
    if (cfg.monitor_file) monitor::MonitorLog::check(*cfg.monitor_file);
    lo.plan_text = encode_rank_table({s.alloc.scheduler, s.alloc.job_id, s.plan, {cfg.kill_grace}});
    lo.control = "none";  // the printed command runs as it is
    LaunchCommand c = build_launch(s.alloc, s.plan, lo);
    std::cout << dry_run_text(s.alloc, s.plan, c, program, lo.workdir, s.env, cfg.hang_timeout > 0);
    return 0;
  }
  if (s.alloc.step_task) {
    if (vm.count("monitor"))
      fmt::print(stderr,
                 "gpurun: --monitor is off inside an srun step: each task runs its "
                 "program directly, with no gpurun to collect samples\n");
    LaunchCommand c = build_launch(s.alloc, s.plan, lo);
    return exec_in_step(s.alloc, s.plan, s.env, program, c.container);
  }
  RunConfig cfg = run_settings(vm, s, lo);
  return run_supervisor(cfg);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!args.empty()) {
      std::vector<std::string> rest(args.begin() + 1, args.end());
      if (args[0] == "info") return cmd_info(rest);
      if (args[0] == "hostlist") return cmd_hostlist(rest);
      if (args[0] == "_rank") return run_rank_wrapper(rest);
      if (args[0] == "help") {
        std::cout << kUsage;
        return 0;
      }
    }
    return cmd_launch(args);
  } catch (const po::error& e) {
    fmt::print(stderr, "gpurun: {} (see gpurun --help)\n",
               gpurun::common::escape_control(e.what()));
    return 2;
  } catch (const proc::ExecError& e) {
    print_error(e);
    return e.err == ENOENT ? 127 : 126;  // what a shell would say
  } catch (const std::exception& e) {
    print_error(e);
    return 2;
  }
}

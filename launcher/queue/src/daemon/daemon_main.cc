// `gpuq daemon`: option parsing, GPU pool detection and defaults for root and per-user daemons.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <stdexcept>

#include "client/client.h"
#include "client/env.h"
#include "daemon/daemon.h"
#include "gpurun/common/strings.h"
#include "gpurun/gpuinfo/gpu_count.h"

namespace gpurun::queue {
namespace po = boost::program_options;

namespace {

// The GPU pool: gpuinfo's one count (NVML, the nvidia-smi GPURUN_NVIDIA_SMI names or the one on
// PATH, the driver's /proc folders), the readers the daemon's sampler also uses.
std::vector<int> detect_gpus(const gpuinfo::SamplerConfig& cfg) {
  gpuinfo::GpuCount c = gpuinfo::count_gpus(cfg);
  if (c.ids.empty())
    throw std::runtime_error(
        fmt::format("no GPUs found ({}): pass --gpus 0,1,... or --gpus none", c.why_none));
  return c.ids;
}

// One sample of the GPUs at start-up; nullopt where nothing can be sampled (no NVML, no
// nvidia-smi: the daemon's sampler says why, once it runs).
std::optional<gpuinfo::GpuSnapshot> first_sample(const gpuinfo::SamplerConfig& cfg) {
  try {
    return gpuinfo::GpuSampler(cfg).sample();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// --gpus naming a GPU the sample does not show: jobs would get CUDA_VISIBLE_DEVICES of a GPU that
// is not there. A warning, not an error: a pool of ids on purpose (tests give a fake one on any
// machine) still starts.
void warn_missing_gpus(const std::vector<int>& gpus, const std::optional<gpuinfo::GpuSnapshot>& s) {
  if (!s || s->gpus.empty()) return;
  std::vector<int> have, missing;
  for (const auto& g : s->gpus)
    if (g.mig < 0) have.push_back(g.index);
  for (int g : gpus)
    if (std::find(have.begin(), have.end(), g) == have.end()) missing.push_back(g);
  if (!missing.empty())
    fmt::print(stderr,
               "gpuq daemon: warning: --gpus names GPU(s) {} that this machine does not show ({} "
               "lists {}): jobs given them will find no GPU there\n",
               join_ids(missing), s->source, join_ids(have));
}

// GPUs in MIG mode become their MIG devices (daemon_mig.cc), as the sample lists them; without a
// sample the GPUs stay whole.
std::vector<int> split_mig_gpus(const std::vector<int>& gpus,
                                const std::optional<gpuinfo::GpuSnapshot>& s,
                                std::map<int, gpuinfo::GpuSample>* mig) {
  if (!s) return gpus;
  try {
    return with_mig_devices(gpus, *s, mig);
  } catch (const std::exception&) {
    return gpus;  // as unsampled: the daemon's sampler says why, once it runs
  }
}

std::string default_state_dir() {
  if (geteuid() == 0) return "/var/lib/gpuq";
  const QueueEnv& env = queue_env();
  if (env.state_home) return *env.state_home + "/gpuq";
  if (env.home) return *env.home + "/.local/state/gpuq";
  throw std::runtime_error("no --state-dir given and $HOME is not set");
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

po::options_description daemon_options() {
  po::options_description desc("gpuq daemon options");
  desc.add_options()("help,h", "show this help")(
      "gpus", po::value<std::string>(),
      "GPU ids to schedule, e.g. 0,1,2,3, or none for CPU jobs only (default: every GPU the "
      "machine has: NVML, else GPURUN_NVIDIA_SMI's or PATH's nvidia-smi, else "
      "/proc/driver/nvidia)")("state-dir", po::value<std::string>(),
                              "job store and run files (default: /var/lib/gpuq as "
                              "root, ~/.local/state/gpuq otherwise)")(
      "socket", po::value<std::string>(),
      "Unix socket (default: /run/gpuq.sock as root, "
      "$XDG_RUNTIME_DIR/gpuq.sock otherwise)")("kill-wait", po::value<int>()->default_value(30),
                                               "seconds between SIGTERM and SIGKILL")(
      "max-gpus-per-user", po::value<int>()->default_value(0),
      "GPUs one user may hold at once (0 = no limit)")(
      "fairshare-half-life", po::value<double>()->default_value(168),
      "hours for past GPU usage to count half in the fair-share order")(
      "boot-id-file", po::value<std::string>(),
      "where the machine's boot id is read (tests use it to simulate a reboot)")(
      "check-invariants",
      "check the in-memory job maps against the store after every turn and stop when one is "
      "broken (tests)")("sample-interval", po::value<int>()->default_value(10),
                        "seconds between GPU and job usage samples (0 = no sampling)")(
      "sample-retention", po::value<double>()->default_value(7),
      "days raw samples are kept (per-job figures are kept with the job)")(
      "sendmail", po::value<std::string>()->default_value("/usr/sbin/sendmail"),
      "the program --mail-type's mails go through (run as `sendmail -t -oi`, the message on "
      "its standard input)")(
      "gpu-outside-queue", po::value<std::string>()->default_value("avoid"),
      "avoid: a GPU that a process outside the queue uses is not given out (checked at every "
      "sample and before GPUs are given out); ignore: it is only shown")(
      "busy-percent", po::value<double>()->default_value(5),
      "flag a GPU that no job holds when its utilisation or memory use reaches this percent")(
      "idle-percent", po::value<double>()->default_value(5),
      "flag a job whose GPU stays below this utilisation percent ...")(
      "idle-minutes", po::value<double>()->default_value(10), "... for this many minutes")(
      "shards-per-gpu", po::value<std::string>(),
      "N, or ID:N,ID:N...: each GPU (or each one named) offers N shards that --gres=shard:K jobs "
      "share; a --gres=gpu job gets such a GPU only while none of its shards is held")(
      "enforce-budgets",
      "cancel running jobs whose user's or account's GPU-hour budget is spent (by default they "
      "run on, as in Slurm, and only new jobs wait)")(
      "mps", po::value<std::string>()->implicit_value("nvidia-cuda-mps-control"),
      "run an MPS control daemon (this nvidia-cuda-mps-control, found on PATH) for each GPU while "
      "shard jobs share it; each job gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for its share");
  return desc;
}

// --shards-per-gpu N (every GPU) or ID:N,ID:N (those GPUs).
std::map<int, int> shard_options(const std::string& text, const std::vector<int>& gpus) {
  auto count = [&](const std::string& v) {
    int n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size() || n < 1 || n > kMaxShardsPerGpu)
      throw std::invalid_argument(fmt::format(
          "--shards-per-gpu '{}': expected N or ID:N,... with N from 1 to {}", text,
          kMaxShardsPerGpu));
    return n;
  };
  std::map<int, int> out;
  if (text.find(':') == std::string::npos) {
    for (int g : gpus) out[g] = count(text);
    return out;
  }
  for (const std::string& entry : common::split(text, ',')) {
    size_t colon = entry.find(':');
    std::vector<int> id = parse_id_list(entry.substr(0, colon == std::string::npos ? 0 : colon));
    if (colon == std::string::npos || id.size() != 1 ||
        std::find(gpus.begin(), gpus.end(), id[0]) == gpus.end())
      throw std::invalid_argument(fmt::format(
          "--shards-per-gpu '{}': '{}' is not ID:N for a GPU of the pool ({})", text, entry,
          join_ids(gpus)));
    out[id[0]] = count(entry.substr(colon + 1));
  }
  return out;
}

// --mps [PATH]: the program, found on PATH when it has no '/'; only with shared GPUs.
std::string find_mps_control(const std::string& name, const DaemonConfig& cfg) {
  if (cfg.shards_per_gpu.empty())
    throw std::invalid_argument("--mps: no GPU is shared (add --shards-per-gpu N)");
  std::optional<std::string> path;
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) path = name;
  } else {
    for (const std::string& dir : common::split(queue_env().path.value_or("/usr/bin:/bin"), ':'))
      if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0 && !path)
        path = dir + "/" + name;
  }
  if (!path)
    throw std::invalid_argument(fmt::format(
        "--mps: {} not found{} (it comes with NVIDIA's driver)", name,
        name.find('/') == std::string::npos ? " on PATH" : ""));
  return *path;
}

// --gpu-outside-queue, --busy-percent, --idle-percent, --idle-minutes.
GpuWatchConfig watch_options(const po::variables_map& vm) {
  GpuWatchConfig w;
  const std::string outside = vm["gpu-outside-queue"].as<std::string>();
  if (outside != "avoid" && outside != "ignore")
    throw std::invalid_argument(
        fmt::format("--gpu-outside-queue '{}': expected avoid or ignore", outside));
  w.avoid_outside = outside == "avoid";
  for (const char* name : {"busy-percent", "idle-percent"}) {
    double v = vm[name].as<double>();
    if (!(v >= 0 && v <= 100))
      throw std::invalid_argument(fmt::format("--{} {}: expected a percent, 0 to 100", name, v));
  }
  w.busy_percent = vm["busy-percent"].as<double>();
  w.idle_percent = vm["idle-percent"].as<double>();
  double minutes = vm["idle-minutes"].as<double>();
  if (!(minutes > 0 && minutes <= 525600))
    throw std::invalid_argument(
        fmt::format("--idle-minutes {}: expected more than 0 and at most a year", minutes));
  w.idle_after_ms = static_cast<int64_t>(minutes * 60000);
  return w;
}

}  // namespace

int cmd_daemon(const Args& a) {
  const po::options_description desc = daemon_options();
  po::variables_map vm;
  po::store(po::command_line_parser(a).options(desc).run(), vm);
  if (vm.count("help")) {
    std::cout
        << "usage: gpuq daemon [--gpus 0,1,2,3] [--state-dir DIR] [--socket PATH]\n"
           "Runs the queue: one per machine as root (0666 socket, callers identified by\n"
           "SO_PEERCRED, jobs run as their submitters), or one per user (0600 socket).\n"
           "SIGTERM stops the daemon but not the running jobs; the next daemon adopts them.\n\n"
        << desc << "\n";
    return 0;
  }
  po::notify(vm);
  DaemonConfig cfg;
  if (queue_env().nvidia_smi) cfg.sampler.nvidia_smi = *queue_env().nvidia_smi;
  if (vm.count("gpus")) {
    const std::string ids = vm["gpus"].as<std::string>();
    if (ids.empty())  // an unset variable in a unit file, most likely
      throw std::invalid_argument(
          "--gpus '': expected GPU ids (0,1,...), or none for a queue of CPU jobs only");
    if (ids != "none") cfg.gpus = parse_id_list(ids);
  } else {
    cfg.gpus = detect_gpus(cfg.sampler);
  }
  const std::optional<gpuinfo::GpuSnapshot> sample = first_sample(cfg.sampler);
  if (vm.count("gpus")) warn_missing_gpus(cfg.gpus, sample);
  cfg.gpus = split_mig_gpus(cfg.gpus, sample, &cfg.mig);
  std::set<int> uniq(cfg.gpus.begin(), cfg.gpus.end());
  if (uniq.size() != cfg.gpus.size())
    throw std::invalid_argument(fmt::format("--gpus '{}' lists an id twice", join_ids(cfg.gpus)));
  cfg.state_dir = vm.count("state-dir") ? vm["state-dir"].as<std::string>() : default_state_dir();
  if (vm.count("socket"))
    cfg.socket_path = vm["socket"].as<std::string>();
  else if (geteuid() == 0)
    cfg.socket_path = "/run/gpuq.sock";
  else
    cfg.socket_path = default_socket_path();
  cfg.kill_wait_s = vm["kill-wait"].as<int>();
  cfg.max_gpus_per_user = vm["max-gpus-per-user"].as<int>();
  if (cfg.max_gpus_per_user < 0)
    throw std::invalid_argument(fmt::format(
        "--max-gpus-per-user {}: expected 0 (no limit) or more", cfg.max_gpus_per_user));
  cfg.fairshare_half_life_s = static_cast<int64_t>(vm["fairshare-half-life"].as<double>() * 3600);
  if (cfg.kill_wait_s < 0) throw std::invalid_argument("--kill-wait must be >= 0");
  cfg.self_exe = self_exe();
  if (vm.count("boot-id-file")) cfg.boot_id_file = vm["boot-id-file"].as<std::string>();
  cfg.check_invariants = vm.count("check-invariants") > 0;
  cfg.sample_interval_s = vm["sample-interval"].as<int>();
  cfg.sendmail = vm["sendmail"].as<std::string>();
  if (cfg.sample_interval_s < 0 || cfg.sample_interval_s > 86400)
    throw std::invalid_argument(
        fmt::format("--sample-interval {}: expected 0 (off) to 86400 s", cfg.sample_interval_s));
  double retention_days = vm["sample-retention"].as<double>();
  if (!(retention_days > 0) || retention_days > 3650)
    throw std::invalid_argument(fmt::format(
        "--sample-retention {}: expected more than 0 and at most 3650 days", retention_days));
  cfg.sample_retention_s = static_cast<int64_t>(retention_days * 86400);
  cfg.watch = watch_options(vm);
  cfg.enforce_budgets = vm.count("enforce-budgets") > 0;
  if (vm.count("shards-per-gpu"))
    cfg.shards_per_gpu = shard_options(vm["shards-per-gpu"].as<std::string>(), cfg.gpus);
  if (vm.count("mps")) cfg.mps_control = find_mps_control(vm["mps"].as<std::string>(), cfg);
  Daemon d(cfg);
  return d.run();
}

}  // namespace gpurun::queue

// wrapper_program.cc: starting the rank's program (wrapper.h): its folder and heartbeat, its
// environment, its CPUs, its output pipes; and reading its heartbeat.
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "alloc/env_util.h"
#include "gpurun/common/terminal.h"
#include "sys/cpubind.h"
#include "sys/system.h"
#include "wrapper/wrapper.h"

namespace gpurun::launcher {
namespace {

// The node's topology for --cpu-bind auto; nullopt when hwloc cannot read it, which local rank 0
// reports in one line (the ranks then run unbound).
std::optional<cpubind::Topology> node_topology(const std::string& host, int local_rank) {
  try {
    return cpubind::Topology::of_machine();
  } catch (const Error& e) {
    if (local_rank == 0)
      fmt::print(stderr, "gpurun: --cpu-bind auto on {}: {}; the ranks run unbound\n",
                 common::escape_control(host), e.what());
    return std::nullopt;
  }
}

// A pipe for one of the program's streams: the read end ours (non-blocking), the write end its.
std::pair<common::Fd, common::Fd> output_pipe() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", strerror(errno)));
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  return {common::Fd(p[0]), common::Fd(p[1])};
}

}  // namespace

void RankWrapper::program_environment(const control::Go& go) {
  StartValues v;
  v.restart = go.restart;
  if (!iface_.empty()) v.iface = iface_;
  if (dir_) {
    v.heartbeat = dir_->heartbeat();
    if (go.watch) {  // Python ranks load the sitecustomize that prints their tracebacks
      v.python_dir = dir_->python_dir();
      v.pystack_dir = dir_->pystack_dir();
    }
  }
  for (auto& [k, val] : start_environment(env_, v)) {
    env_[k] = val;
    // Into a container too, but PYTHONPATH (program_argv: only the folder, which is mounted).
    if (k != "PYTHONPATH" && std::find(rank_keys_.begin(), rank_keys_.end(), k) == rank_keys_.end())
      rank_keys_.push_back(k);
  }
}

// This rank's CPUs under --cpu-bind `spec` (empty: no binding); OMP_NUM_THREADS follows.
std::vector<int> RankWrapper::cpu_binding(const std::string& spec) const {
  if (spec == "none") return {};
  std::optional<cpubind::Topology> topo;
  if (spec == "auto") topo = node_topology(me_.host, me_.local_rank);
  std::vector<std::optional<std::string>> gpus;  // each local rank's first GPU on this node
  for (const auto& r : plan_.plan.ranks) {
    if (r.node_rank != me_.node_rank) continue;
    std::size_t pos = r.gpus.empty() ? visible_.size() : static_cast<std::size_t>(r.gpus[0]);
    gpus.push_back(pos < visible_.size() ? std::optional<std::string>(visible_[pos])
                                         : std::nullopt);
  }
  auto all = cpubind::binding(spec, cpubind::real_tree(), topo ? &*topo : nullptr,
                              cpubind::allowed_cpus(), gpus, me_.host);
  return all.at(static_cast<std::size_t>(me_.local_rank));
}

// The program, or under --container the runtime's command that runs it in the image with the
// rank's variables, GPUs, folder and working folder.
std::vector<std::string> RankWrapper::program_argv() const {
  if (!args_.container) return args_.program;
  ContainerRank r;
  for (const auto& k : rank_keys_) r.env.emplace_back(k, env_.at(k));
  for (const auto& [k, v] : env_)
    if (passed_into_container(k) &&
        std::find(rank_keys_.begin(), rank_keys_.end(), k) == rank_keys_.end())
      r.env.emplace_back(k, v);
  if (watch_ && env_.count("PYTHONPATH") && dir_)
    r.env.emplace_back("PYTHONPATH", dir_->python_dir());
  if (dir_) r.binds.push_back(dir_->path());
  r.workdir = sys::current_dir();
  return container_argv(*args_.container, r, args_.program);
}

void RankWrapper::start_program(const control::Go& go) {
  watch_ = go.watch != 0;
  std::vector<int> cpus;
  std::vector<std::string> argv;
  try {
    {  // also under --control none (the --dry-run command as printed): the same environment
      dir_ = RankDir::create(detail::temp_dir(env_), me_.rank);
    }
    program_environment(go);
    cpus = cpu_binding(go.cpu_bind);
    if (!cpus.empty()) env_["OMP_NUM_THREADS"] = std::to_string(cpus.size());
    argv = program_argv();
  } catch (const Error& e) {
    exec_failure_ = control::Exit{1, 0, 0, control::Text{std::string("cannot start: ") + e.what()}};
    return;
  }
  std::pair<common::Fd, common::Fd> pipes[2];
  if (control_) pipes[0] = output_pipe(), pipes[1] = output_pipe();
  int w1 = pipes[0].second.get(), w2 = pipes[1].second.get();
  pid_t parent = getpid();
  try {
    child_ = proc::Child::spawn(argv, env_, [parent, w1, w2, &cpus] {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(137);  // the wrapper died before prctl took effect
      // eu-stack/gdb, started by the wrapper when the job hangs, may attach under Yama.
      prctl(PR_SET_PTRACER, parent, 0, 0, 0);
      if (!cpus.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : cpus) CPU_SET(c, &set);
        sched_setaffinity(0, sizeof set, &set);
      }
      if (w1 >= 0) dup2(w1, STDOUT_FILENO);
      if (w2 >= 0) dup2(w2, STDERR_FILENO);
    });
  } catch (const proc::ExecError& e) {
    exec_failure_ = control::Exit{e.err == ENOENT ? 127 : 126, 0, 0, control::Text{e.what()}};
    return;
  }
  out_[0] = std::move(pipes[0].first);
  out_[1] = std::move(pipes[1].first);
  started_program_ = true;
  started_ = proc::now_seconds();
  report(control::Running{});
  if (watch_) timers_.set(Timer::heartbeat, started_ + 1.0);
  if (go.monitor_ms > 0 && me_.local_rank == 0) start_monitor(go.monitor_ms);
}

// --monitor: this node's GPUs, those the plan gave the job, sampled in a thread (monitor.h).
void RankWrapper::start_monitor(int interval_ms) {
  gpuinfo::SamplerConfig cfg;
  if (auto smi = env_.find("GPURUN_NVIDIA_SMI"); smi != env_.end()) cfg.nvidia_smi = smi->second;
  try {
    monitor_.emplace(cfg, interval_ms, monitor::job_gpus(plan_.plan, me_.node_rank, visible_));
  } catch (const std::exception& e) {
    report(control::GpuSamplesFailed{control::Text{std::string("--monitor: ") + e.what()}});
  }
}

void RankWrapper::report_monitor() {
  for (const auto& m : monitor_->take()) report(m);
}

// About once a second: a new step in the heartbeat file, or any output, is progress.
void RankWrapper::beat() {
  bool progress = output_since_beat_;
  output_since_beat_ = false;
  if (auto s = dir_ ? dir_->read_step() : std::nullopt; s && s != step_) {
    step_ = s;
    progress = true;
  }
  if (progress) report(control::StepReport{step_.value_or(-1)});
}

}  // namespace gpurun::launcher

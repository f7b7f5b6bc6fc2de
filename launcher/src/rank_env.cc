// rank_env.cc: the plan string each wrapper receives, and the environment of one rank.
#include <fmt/format.h>

#include <cmath>

#include "env_util.h"
#include "gpurun/launcher/error.h"
#include "gpurun/launcher/launch.h"

namespace gpurun::launcher {
namespace {

// Percent-escapes the plan's separators so any host or job id survives the round trip.
std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == ';' || c == ',' || c == '*' || c == '+' || c == '%' || c == '=' || c == ' ')
      o += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else
      o += c;
  }
  return o;
}

std::string unesc(const std::string& s) {
  std::string o;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      o += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      o += s[i];
    }
  }
  return o;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t b = 0;
  while (true) {
    std::size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

}  // namespace

std::string encode_plan(const Allocation& a, const RankPlan& p, const PlanOptions& o,
                        const WrapperSettings& w) {
  std::string nodes;
  for (const auto& n : p.nodes) {
    nodes += fmt::format("{}{}*{}*{}", nodes.empty() ? "" : ",", esc(n.host), n.ranks, n.gpus);
    for (std::size_t i = 0; i < n.gpu_ids.size(); ++i) nodes += (i ? "+" : "*") + esc(n.gpu_ids[i]);
  }
  return fmt::format("v1;s={};j={};a={};p={};c={};g={};t={};k={};n={}", to_string(a.scheduler),
                     a.job_id ? esc(*a.job_id) : "-", esc(p.master_addr), p.master_port,
                     p.cpus_per_rank, o.gpus_per_rank ? std::to_string(*o.gpus_per_rank) : "-",
                     p.stdout_tty ? 1 : 0, std::llround(w.kill_grace * 1000), nodes);
}

DecodedPlan decode_plan(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Error(
        fmt::format("--plan '{}': {} (gpurun and its rank wrapper must be the same "
                    "version)",
                    text, why));
  };
  auto parts = split(text, ';');
  if (parts.empty() || parts[0] != "v1") throw bad("not a v1 plan");
  Env kv;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    auto eq = parts[i].find('=');
    if (eq == std::string::npos) throw bad("field without '='");
    kv[parts[i].substr(0, eq)] = parts[i].substr(eq + 1);
  }
  for (const char* k : {"s", "j", "a", "p", "c", "g", "n"})
    if (!kv.count(k)) throw bad(fmt::format("field '{}' missing", k));
  DecodedPlan d;
  try {
    d.scheduler = parse_scheduler(kv["s"], "plan scheduler");
    if (kv["j"] != "-") d.job_id = unesc(kv["j"]);
    Allocation a;
    a.scheduler = d.scheduler;
    a.oversubscribe_ok = true;
    int total = 0;
    for (const auto& item : split(kv["n"], ',')) {
      auto f = split(item, '*');
      if (f.size() != 3 && f.size() != 4)
        throw bad(fmt::format("node '{}' is not host*ranks*gpus[*id+id...]", item));
      NodeAlloc n{unesc(f[0]), static_cast<int>(detail::parse_count("plan ranks", f[1])),
                  static_cast<int>(detail::parse_count("plan gpus", f[2]))};
      if (f.size() == 4)
        for (const auto& id : split(f[3], '+')) n.gpu_ids.push_back(unesc(id));
      total += n.slots;
      a.nodes.push_back(n);
    }
    PlanOptions o;
    o.ntasks = total;
    o.master_port = static_cast<int>(detail::parse_count("plan port", kv["p"]));
    o.cpus_per_rank = static_cast<int>(detail::parse_count("plan cpus", kv["c"]));
    if (kv["g"] != "-")
      o.gpus_per_rank = static_cast<int>(detail::parse_count("plan gpus", kv["g"]));
    d.plan = make_plan(a, o);
    d.plan.master_addr = unesc(kv["a"]);
    d.plan.stdout_tty = kv.count("t") && kv["t"] == "1";
    if (kv.count("k"))
      d.wrapper.kill_grace = double(detail::parse_count("plan kill grace", kv["k"])) / 1000;
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("--plan", 0) == 0) throw;
    throw bad(e.what());
  }
  return d;
}

bool step_bound_task_gpus(const Allocation& a, const RankPlan& plan) {
  const int node_gpus = plan.nodes.at(static_cast<std::size_t>(a.step_task->node_rank)).gpus;
  return !a.local_gpu_ids.empty() && static_cast<int>(a.local_gpu_ids.size()) < node_gpus;
}

RankEntry step_task_entry(const Allocation& a, const RankPlan& plan) {
  const StepTask& t = *a.step_task;
  // The step's own numbers are the truth (srun may distribute cyclically); the plan supplies
  // this slot's GPU positions.
  RankEntry me;
  for (const auto& r : plan.ranks)
    if (r.node_rank == t.node_rank && r.local_rank == t.local_rank) me = r;
  me.rank = t.rank;
  // Slurm/jsrun may already have bound this task to its own GPUs (--gpus-per-task,
  // --gpu-bind): then the task's whole visible list is its share.
  if (step_bound_task_gpus(a, plan)) {
    me.gpus.clear();
    for (std::size_t i = 0; i < a.local_gpu_ids.size(); ++i) me.gpus.push_back(static_cast<int>(i));
  }
  return me;
}

std::vector<std::pair<std::string, std::string>> rank_environment(
    const RankPlan& p, const RankEntry& r, Scheduler s, const std::optional<std::string>& job_id,
    const std::optional<std::vector<std::string>>& visible) {
  std::string cvd;
  for (int pos : r.gpus) {
    if (!cvd.empty()) cvd += ',';
    if (!visible) {
      cvd += fmt::format("<{}#{}>", r.host, pos);
      continue;
    }
    if (pos >= static_cast<int>(visible->size()))
      throw Error(fmt::format(
          "rank {} needs GPU position {} on {}, but CUDA_VISIBLE_DEVICES there lists only {} "
          "GPU{}: the nodes of this job differ in GPU count (use --gpus-per-rank or "
          "--nproc-per-node)",
          r.rank, pos, r.host, visible->size(), visible->size() == 1 ? "" : "s"));
    cvd += (*visible)[static_cast<std::size_t>(pos)];
  }
  return {
      {"RANK", std::to_string(r.rank)},
      {"WORLD_SIZE", std::to_string(p.world_size)},
      {"LOCAL_RANK", std::to_string(r.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(r.local_world_size)},
      {"NODE_RANK", std::to_string(r.node_rank)},
      {"GROUP_RANK", std::to_string(r.node_rank)},
      {"MASTER_ADDR", p.master_addr},
      {"MASTER_PORT", std::to_string(p.master_port)},
      {"CUDA_VISIBLE_DEVICES", cvd},
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
      {"OMP_NUM_THREADS", std::to_string(p.cpus_per_rank)},
      {"GPURUN_SCHEDULER", to_string(s)},
      {"GPURUN_JOB_ID", job_id.value_or("")},
      {"GPURUN_STDOUT_TTY", p.stdout_tty ? "1" : "0"},
  };
}

std::vector<std::pair<std::string, std::string>> start_environment(const Env& env,
                                                                   const StartValues& v) {
  std::vector<std::pair<std::string, std::string>> out{
      {"GPURUN_RESTART_COUNT", std::to_string(v.restart)}};
  if (v.heartbeat) out.emplace_back("GPURUN_HEARTBEAT", *v.heartbeat);
  if (!env.count("PYTHONUNBUFFERED")) out.emplace_back("PYTHONUNBUFFERED", "1");
  if (v.iface)
    for (const char* var : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"})
      if (!env.count(var)) out.emplace_back(var, *v.iface);
  if (v.python_dir) {
    auto old = env.find("PYTHONPATH");
    const bool more = old != env.end() && !old->second.empty();
    out.emplace_back("PYTHONPATH", *v.python_dir + (more ? ":" + old->second : ""));
    if (v.pystack_dir) out.emplace_back("GPURUN_PYSTACK_DIR", *v.pystack_dir);
  }
  return out;
}

}  // namespace gpurun::launcher

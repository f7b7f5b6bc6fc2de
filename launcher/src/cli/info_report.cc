// info_report.cc: see info_report.h. The JSON fields are the contract of DESIGN.md (`gpurun info --json`).
#include "cli/info_report.h"

#include <fmt/format.h>

#include <ctime>
#include <utility>

#include "alloc/env_util.h"
#include "gpurun/common/terminal.h"

namespace gpurun::launcher {
namespace {

using common::escape_control;

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// A list of names from the environment, each made safe for a terminal, joined.
std::string join_shown(const std::vector<std::string>& v, const char* sep) {
  std::vector<std::string> e;
  for (const auto& x : v) e.push_back(escape_control(x));
  return join(e, sep);
}

// A variable's value as the dry run prints it: as it is, or $'...' with escapes when it holds a
// control character.
std::string value_shown(const std::string& v) {
  return escape_control(v) == v ? v : shell_quote(v);
}

std::string utc(std::int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

nlohmann::json info_json(const Allocation& a, const RankPlan& p) {
  using nlohmann::json;
  json j;
  j["scheduler"] = to_string(a.scheduler);
  j["flavor"] = a.flavor;
  j["job_id"] = a.job_id ? json(*a.job_id) : json(nullptr);
  j["world_size"] = p.world_size;
  j["nodes"] = json::array();
  for (const auto& n : a.nodes)
    j["nodes"].push_back({{"host", n.host}, {"slots", n.slots}, {"gpus", n.gpus}});
  j["master_addr"] = p.master_addr;
  j["master_port"] = p.master_port;
  j["cpus_per_rank"] = p.cpus_per_rank;
  j["ranks"] = json::array();
  for (const auto& r : p.ranks)
    j["ranks"].push_back({{"rank", r.rank},
                          {"host", r.host},
                          {"node_rank", r.node_rank},
                          {"local_rank", r.local_rank},
                          {"gpus", r.gpus}});
  j["this_host"] = a.this_host ? json(*a.this_host) : json(nullptr);
  j["visible_gpus"] = a.local_gpu_ids;
  j["end_time"] = a.end_time ? json(*a.end_time) : json(nullptr);
  if (a.step_task)
    j["step_task"] = {{"engine", a.step_task->engine},
                      {"rank", a.step_task->rank},
                      {"local_rank", a.step_task->local_rank},
                      {"node_rank", a.step_task->node_rank}};
  else
    j["step_task"] = nullptr;
  std::vector<std::string> notes = a.notes;
  notes.insert(notes.end(), p.notes.begin(), p.notes.end());
  j["notes"] = notes;
  j["sources"] = a.sources;
  return j;
}

std::string info_text(const Allocation& a, const RankPlan& p) {
  std::string s;
  s += fmt::format("scheduler   {} ({}){}\n", to_string(a.scheduler), a.flavor,
                   a.job_id ? ", job " + escape_control(*a.job_id) : "");
  s += fmt::format("nodes       {}\n", a.nodes.size());
  for (const auto& n : a.nodes)
    s += fmt::format("            {:<20} {} slot{}, {} GPU{}\n", escape_control(n.host), n.slots,
                     n.slots == 1 ? "" : "s", n.gpus, n.gpus == 1 ? "" : "s");
  s += fmt::format("this node   {}, visible GPUs: {}\n", escape_control(a.this_host.value_or("?")),
                   a.local_gpu_ids.empty() ? "none" : join_shown(a.local_gpu_ids, ","));
  if (a.end_time) s += fmt::format("ends        {}\n", utc(*a.end_time));
  if (a.step_task)
    s += fmt::format(
        "step        inside a {} task: this process is rank {} of {} (local rank {})\n",
        a.step_task->engine, a.step_task->rank, a.step_task->world_size, a.step_task->local_rank);
  s += fmt::format("plan        {} rank{} on {} node{}, {} CPU{} per rank\n", p.world_size,
                   p.world_size == 1 ? "" : "s", p.nodes.size(), p.nodes.size() == 1 ? "" : "s",
                   p.cpus_per_rank, p.cpus_per_rank == 1 ? "" : "s");
  s += fmt::format("master      {}:{}\n", escape_control(p.master_addr), p.master_port);
  s += fmt::format("from        {}\n", join(a.sources, ", "));
  for (const auto& n : a.notes) s += fmt::format("note        {}\n", escape_control(n));
  for (const auto& n : p.notes) s += fmt::format("note        {}\n", escape_control(n));
  s += fmt::format("\n{:>6}  {:<20} {:>4} {:>5}  {}\n", "RANK", "HOST", "NODE", "LOCAL", "GPUS");
  for (const auto& r : p.ranks) {
    std::vector<std::string> g;
    for (int x : r.gpus) g.push_back(std::to_string(x));
    s += fmt::format("{:>6}  {:<20} {:>4} {:>5}  {}\n", r.rank, escape_control(r.host), r.node_rank,
                     r.local_rank, g.empty() ? "-" : join(g, ","));
  }
  return s;
}

namespace {

// One rank's program as the wrapper starts it in the image (it also binds its rank folder).
std::string container_line(const LaunchCommand& c,
                           const std::vector<std::pair<std::string, std::string>>& env,
                           const std::vector<std::string>& program, const std::string& workdir) {
  if (!c.container || c.container->runtime == ContainerRuntime::pyxis) return "";
  std::vector<std::pair<std::string, std::string>> inside;
  for (const auto& kv : env)
    if (kv.first != "PYTHONPATH") inside.push_back(kv);  // only the mounted folder goes in
  std::vector<std::string> words;
  for (const auto& w : container_argv(*c.container, ContainerRank{inside, {}, workdir}, program))
    words.push_back(shell_quote(w));
  return "# in the image: " + join(words, " ") + "\n";
}

std::string quoted(const std::vector<std::string>& words) {
  std::vector<std::string> q;
  for (const auto& w : words) q.push_back(shell_quote(w));
  return join(q, " ");
}

// The engine's command as a user can paste it (gpurun itself passes --control HOST:PORT:TOKEN of
// its control socket where this says none).
std::string command_text(const Allocation& a, const RankPlan& p, const LaunchCommand& c,
                         const std::vector<std::string>& program) {
  std::string s;
  if (c.engine == Engine::step)
    return fmt::format(
        "# inside a {} task: gpurun sets rank {}'s environment and execs the program\n{}\n",
        a.step_task->engine, a.step_task->rank, quoted(program));
  s += "# runnable as printed: with --control none the ranks run without gpurun watching them "
       "(no fail-fast, hang detection, restarts or signal forwarding); gpurun passes its control "
       "socket's HOST:PORT:TOKEN there\n";
  if (c.engine == Engine::fork)
    return s + fmt::format("for r in $(seq 0 {}); do GPURUN_RANK=$r {} & done; wait\n",
                           p.world_size - 1, quoted(c.wrapper));
  for (const auto& [k, v] : c.engine_env) s += fmt::format("{}={} \\\n  ", k, shell_quote(v));
  if (!c.slurm_hostfile.empty())
    s += fmt::format("SLURM_HOSTFILE=<a file: {}> \\\n  ", join_shown(c.slurm_hostfile, " "));
  return s + quoted(c.argv) + "\n";
}

// What only the start can tell, as it will be: the rank's folder, the interface.
StartValues start_placeholders(const Env& env, const RankEntry& r, bool watch) {
  const std::string dir = fmt::format("{}/gpurun-<host>-p<pid>.<start>-rank{}-<random>",
                                      detail::temp_dir(env), r.rank);
  StartValues v;
  v.heartbeat = dir + "/heartbeat";
  v.iface = "<the interface that routes to MASTER_ADDR, found at start>";
  if (watch) {
    v.python_dir = dir + "/python";
    v.pystack_dir = dir + "/pystacks";
  }
  return v;
}

}  // namespace

std::string dry_run_text(const Allocation& a, const RankPlan& p, const LaunchCommand& c,
                         const std::vector<std::string>& program, const std::string& workdir,
                         const Env& env, bool watch) {
  std::string s;
  s += fmt::format("# scheduler {}{}, engine {}\n", to_string(a.scheduler),
                   a.job_id ? " job " + escape_control(*a.job_id) : "", to_string(c.engine));
  for (const auto* notes : {&a.notes, &p.notes, &c.notes})
    for (const auto& n : *notes) s += "# note: " + escape_control(n) + "\n";
  s += command_text(a, p, c, program);
  // In a step, this task is shown as it will run; where the step bound each task to its own GPUs
  // (--gpus-per-task), the node's other tasks see others, unknown here.
  const std::optional<RankEntry> task =
      a.step_task ? std::optional<RankEntry>(step_task_entry(a, p)) : std::nullopt;
  const bool bound = task && step_bound_task_gpus(a, p);
  // A large plan shows its first kRanksShown ranks, its last and, in a step, this task's: all
  // 32,768 ranks' variables took minutes and 15 GB (each TF_CONFIG lists every rank).
  constexpr std::size_t kRanksShown = 32;
  const std::size_t n = p.ranks.size();
  std::size_t hidden = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const RankEntry& plan_rank = p.ranks[i];
    const bool is_task = task && plan_rank.node_rank == a.step_task->node_rank &&
                         plan_rank.local_rank == a.step_task->local_rank;
    if (i >= kRanksShown && i + 1 < n && !is_task) {
      hidden += 1;
      continue;
    }
    if (hidden)
      s += fmt::format("\n# {} more ranks: as the others, each with its own values (not shown)\n",
                       std::exchange(hidden, 0));
    const RankEntry& r = is_task ? *task : plan_rank;
    bool here = a.this_host && r.host == *a.this_host;
    bool single = a.nodes.size() == 1;
    std::optional<std::vector<std::string>> vis;
    if ((here || single) && (!bound || is_task))
      vis = a.local_gpu_ids;
    else if (const auto& ids = p.nodes.at(static_cast<std::size_t>(r.node_rank)).gpu_ids;
             !ids.empty())
      vis = ids;  // the scheduler named that node's GPUs, as its wrapper will take them
    s += fmt::format("\n# rank {} on {}\n", r.rank, escape_control(r.host));
    auto vars = rank_environment(p, r, a.scheduler, a.job_id, vis);
    // Inside a step gpurun execs the program itself: no folder, no interface check.
    for (auto& kv :
         start_environment(env, task ? StartValues{} : start_placeholders(env, r, watch)))
      vars.push_back(kv);
    for (const auto& [k, v] : vars) s += fmt::format("{}={}\n", k, value_shown(v));
    s += container_line(c, vars, program, workdir);
  }
  return s;
}

}  // namespace gpurun::launcher

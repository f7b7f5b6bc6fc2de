// launch.cc: engine selection and command lines (see launch.h).
//
// Every engine starts the same wrapper, `gpurun _rank --plan P --control C -- PROGRAM ARGS`,
// once per rank; the wrapper learns its global rank from the engine's variables and derives the
// rest from the plan, so the engines only have to place ranks in plan order (block per node).
#include "gpurun/launcher/launch.h"

#include <fmt/format.h>

#include <sstream>

#include "gpurun/common/terminal.h"
#include "gpurun/launcher/error.h"
#include "gpurun/launcher/hostlist.h"

namespace gpurun::launcher {

const char* to_string(Engine e) {
  switch (e) {
    case Engine::srun:
      return "srun";
    case Engine::mpirun:
      return "mpirun";
    case Engine::blaunch:
      return "mpirun+blaunch";
    case Engine::jsrun:
      return "jsrun";
    case Engine::pbsdsh:
      return "pbsdsh";
    case Engine::fork:
      return "local";
    case Engine::step:
      return "step";
  }
  return "?";
}

std::string shell_quote(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-+=./:,@%^") == std::string::npos)
    return w;
  if (common::escape_control(w) != w) {
    // Control characters: bash's $'...' spells them as escapes, so the word is both safe on a
    // terminal and the same word when pasted.
    std::string t;
    for (char c : w) t += c == '\\' ? "\\\\" : c == '\'' ? "\\'" : std::string(1, c);
    return "$'" + common::escape_control(t) + "'";
  }
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {

std::optional<std::string> find(const LaunchOptions& o, const std::string& tool) {
  return o.find_tool ? o.find_tool(tool) : std::nullopt;
}

// Engines a scheduler prefers, best first, for --launcher auto.
Engine auto_engine(const Allocation& a, const LaunchOptions& o, std::vector<std::string>& notes) {
  switch (a.scheduler) {
    case Scheduler::slurm:
      if (find(o, "srun")) return Engine::srun;
      if (find(o, "mpirun")) {
        notes.push_back("srun not found on PATH: launching with mpirun inside the allocation");
        return Engine::mpirun;
      }
      notes.push_back("srun not found on PATH (the command below needs it)");
      return Engine::srun;
    case Scheduler::lsf:
      if (find(o, "jsrun")) return Engine::jsrun;
      return Engine::blaunch;
    case Scheduler::pbs:
      if (find(o, "mpirun")) {
        notes.push_back(
            "PBS: mpirun starts remote ranks through TM when Open MPI was built with it, else ssh");
        return Engine::mpirun;
      }
      if (find(o, "pbsdsh")) {
        notes.push_back("mpirun not found on PATH: falling back to pbsdsh");
        return Engine::pbsdsh;
      }
      notes.push_back("mpirun not found on PATH (the command below needs it)");
      return Engine::mpirun;
    case Scheduler::gpuq:
    case Scheduler::local:
      if (find(o, "mpirun")) return Engine::mpirun;
      notes.push_back("mpirun not found on PATH: gpurun starts the ranks itself (no MPI wire-up)");
      return Engine::fork;
  }
  return Engine::fork;
}

Engine parse_engine(const std::string& name) {
  if (name == "srun") return Engine::srun;
  if (name == "mpirun") return Engine::mpirun;
  if (name == "blaunch") return Engine::blaunch;
  if (name == "jsrun") return Engine::jsrun;
  if (name == "pbsdsh") return Engine::pbsdsh;
  if (name == "local") return Engine::fork;
  throw Error(fmt::format(
      "--launcher '{}': expected auto, srun, mpirun, blaunch, jsrun, pbsdsh or local", name));
}

std::vector<std::string> wrapper(const LaunchOptions& o, Engine e, const std::string& plan,
                                 const std::optional<ContainerSpec>& ctr) {
  // Under pyxis the wrapper runs inside the image: the image's gpurun, found on its PATH.
  bool pyxis = ctr && ctr->runtime == ContainerRuntime::pyxis;
  std::vector<std::string> w{
      pyxis ? "gpurun" : o.self_exe, "_rank", "--plan", plan, "--control", o.control};
  // The user's PATH reaches the program whatever the engine did to it (gpurun's own fork changes
  // nothing; inside pyxis the image's PATH holds). Only mpirun changes LD_LIBRARY_PATH: it is
  // handed on for mpirun, "" meaning unset.
  if (e != Engine::fork && !pyxis && o.user_path) w.insert(w.end(), {"--path", *o.user_path});
  if ((e == Engine::mpirun || e == Engine::blaunch) && !pyxis)
    w.insert(w.end(), {"--ld-library-path", o.user_ld_library_path.value_or("")});
  if (ctr && !pyxis)
    w.insert(w.end(), {"--container-runtime", to_string(ctr->runtime), "--container", ctr->image});
  w.push_back("--");
  w.insert(w.end(), o.program.begin(), o.program.end());
  return w;
}

std::string host_slots(const RankPlan& p) {
  std::string s;
  for (const auto& n : p.nodes) s += fmt::format("{}{}:{}", s.empty() ? "" : ",", n.host, n.ranks);
  return s;
}

void append(std::vector<std::string>& v, const std::vector<std::string>& more) {
  v.insert(v.end(), more.begin(), more.end());
}

std::vector<std::string> mpirun_argv(const Allocation& a, const RankPlan& p, const LaunchOptions& o,
                                     const std::string& exe) {
  std::vector<std::string> v{exe};
  if (o.as_root) v.push_back("--allow-run-as-root");
  v.insert(v.end(), {"-n", std::to_string(p.world_size)});
  bool single_machine = a.scheduler == Scheduler::local || a.scheduler == Scheduler::gpuq;
  if (single_machine) {
    v.push_back("--oversubscribe");
  } else {
    // Fill each node's slots before the next: the wrapper checks the placement.
    v.insert(v.end(), {"--host", host_slots(p), "--map-by", "slot"});
    // Only what is set: mpirun warns of a -x variable it cannot find. The wrapper gives the
    // program gpurun's values either way (an unset LD_LIBRARY_PATH stays unset there).
    if (o.user_path) v.insert(v.end(), {"-x", "PATH"});
    if (o.user_ld_library_path) v.insert(v.end(), {"-x", "LD_LIBRARY_PATH"});
  }
  if (o.tag_output) v.push_back("--tag-output");
  // Never mpirun's own binding: with -n 2 or fewer it pins each rank to one core (and the
  // rank's OMP_NUM_THREADS threads with it); --cpu-bind none means none, and else the wrapper
  // binds.
  v.insert(v.end(), {"--bind-to", "none"});
  return v;
}

// --container: the runtime, checked against the engine (pyxis needs srun starting the ranks).
std::optional<ContainerSpec> container_for(const Allocation& a, Engine e, const LaunchOptions& o,
                                           std::vector<std::string>& notes) {
  if (o.container_image.empty()) return std::nullopt;
  bool pyxis_ok = e == Engine::srun && o.srun_pyxis;
  ContainerSpec s{pick_container_runtime(o.container_runtime, pyxis_ok, o.find_tool),
                  o.container_image};
  if (s.runtime == ContainerRuntime::pyxis && e != Engine::srun)
    throw Error(fmt::format(
        "--container-runtime pyxis: the ranks must start through srun (engine here: {}); use "
        "apptainer or podman, or launch from the batch script with --launcher srun",
        to_string(e)));
  if (s.runtime == ContainerRuntime::podman && a.scheduler != Scheduler::local &&
      a.scheduler != Scheduler::gpuq)
    notes.push_back(
        "podman's CDI devices are the node's GPU numbers, taken from each rank's "
        "CUDA_VISIBLE_DEVICES: where the scheduler renumbers GPUs in the job's cgroup, use "
        "apptainer or pyxis");
  return s;
}

// srun's command line for the plan: the nodes, the tasks (per node when even, else one host per
// task from a file), the CPUs, PMIx, labels, and pyxis' container flags.
void srun_command(const RankPlan& p, const LaunchOptions& o, LaunchCommand& c) {
  c.argv = {find(o, "srun").value_or("srun"), "--kill-on-bad-exit=1",
            fmt::format("--nodes={}", p.nodes.size()), fmt::format("--ntasks={}", p.world_size)};
  bool uniform = true;
  for (const auto& n : p.nodes) uniform = uniform && n.ranks == p.nodes.front().ranks;
  if (uniform) {
    std::vector<std::string> hosts;
    for (const auto& n : p.nodes) hosts.push_back(n.host);
    c.argv.push_back("--nodelist=" + compress_hostlist(hosts));
    c.argv.push_back(fmt::format("--ntasks-per-node={}", p.nodes.front().ranks));
  } else {
    // Uneven counts: srun's arbitrary distribution reads one host per task from SLURM_HOSTFILE.
    // No --nodelist then: with it srun 22.05 wants one entry per task ("You asked for 3 tasks
    // but hostlist specified 2 nodes"); the file alone names the nodes.
    c.argv.push_back("--distribution=arbitrary");
    for (const auto& r : p.ranks) c.slurm_hostfile.push_back(r.host);
  }
  if (!o.exclude_hosts.empty()) c.argv.push_back("--exclude=" + compress_hostlist(o.exclude_hosts));
  c.argv.push_back(fmt::format("--cpus-per-task={}", p.cpus_per_rank));
  bool pmix = false;
  for (const auto& m : o.srun_mpi_plugins) pmix = pmix || m.rfind("pmix", 0) == 0;
  if (pmix) c.argv.push_back("--mpi=pmix");
  if (o.tag_output) c.argv.push_back("--label");
  if (o.cpu_bind != "none") c.argv.push_back("--cpu-bind=none");  // the wrapper binds
  if (c.container && c.container->runtime == ContainerRuntime::pyxis)
    append(c.argv, pyxis_srun_flags(c.container->image, o.workdir));
}

// mpirun with LSF's blaunch as its remote agent; without blaunch, plain mpirun over ssh (or an
// error when blaunch was asked for by name).
void blaunch_command(const Allocation& a, const RankPlan& p, const LaunchOptions& o,
                     LaunchCommand& c) {
  c.argv = mpirun_argv(a, p, o, find(o, "mpirun").value_or("mpirun"));
  if (auto bl = find(o, "blaunch")) {
    c.argv.insert(c.argv.begin() + 1, {"--mca", "plm_rsh_agent", *bl});
  } else if (o.launcher == "blaunch") {
    throw Error("--launcher blaunch: blaunch not found in LSF_BINDIR or on PATH");
  } else {
    c.engine = Engine::mpirun;
    c.notes.push_back("blaunch not found in LSF_BINDIR or on PATH: mpirun falls back to ssh");
  }
}

void jsrun_command(const RankPlan& p, const LaunchOptions& o, LaunchCommand& c) {
  // jsrun's resource sets are the same on every host: --rs_per_host cannot say 2 here, 4 there.
  for (const auto& n : p.nodes)
    if (n.ranks != p.nodes.front().ranks)
      throw Error(fmt::format(
          "--launcher jsrun: the plan puts {} ranks on {} but {} on {}, and jsrun's "
          "--rs_per_host is one number: use --nproc-per-node N (the same on every node), or "
          "mpirun",
          p.nodes.front().ranks, p.nodes.front().host, n.ranks, n.host));
  c.argv = {find(o, "jsrun").value_or("jsrun"),
            fmt::format("--nrs={}", p.world_size),
            "--tasks_per_rs=1",
            fmt::format("--cpu_per_rs={}", p.cpus_per_rank),
            fmt::format("--gpu_per_rs={}", p.ranks.front().gpus.size()),
            fmt::format("--rs_per_host={}", p.nodes.front().ranks),
            "--launch_distribution=packed"};
  if (o.tag_output) c.argv.push_back("--stdio_mode=prepended");
}

void pbsdsh_command(const Allocation& a, const RankPlan& p, const LaunchOptions& o,
                    LaunchCommand& c) {
  // pbsdsh numbers its tasks by node-file line; the plan numbers ranks node by node.
  if (a.host_file_interleaved)
    throw Error(
        "--launcher pbsdsh: PBS_NODEFILE names a host's slots apart (a b a ...), and pbsdsh "
        "numbers ranks by line: ranks would land on other hosts than planned, two on one "
        "GPU; use mpirun (--launcher mpirun)");
  if (p.world_size != a.total_slots())
    throw Error(fmt::format(
        "--launcher pbsdsh starts one rank per PBS_NODEFILE line ({}), but the plan has {} "
        "ranks: use mpirun, or request {} slots",
        a.total_slots(), p.world_size, p.world_size));
  c.argv = {find(o, "pbsdsh").value_or("pbsdsh"), "-v"};
}

}  // namespace

LaunchCommand build_launch(const Allocation& a, const RankPlan& p, const LaunchOptions& o) {
  LaunchCommand c;
  if (a.step_task) {
    c.engine = Engine::step;
    if (o.launcher != "auto")
      c.notes.push_back(fmt::format("--launcher {} ignored: already inside a {} step", o.launcher,
                                    a.step_task->engine));
    c.container = container_for(a, c.engine, o, c.notes);
    return c;
  }
  c.engine = o.launcher == "auto" ? auto_engine(a, o, c.notes) : parse_engine(o.launcher);
  c.container = container_for(a, c.engine, o, c.notes);
  c.wrapper = wrapper(o, c.engine, o.plan_text, c.container);
  switch (c.engine) {
    case Engine::fork:
      // gpurun's own fork starts every rank on this host.
      if (p.nodes.size() > 1)
        throw Error(fmt::format(
            "--launcher local starts every rank on this host, but the plan spreads {} ranks over "
            "{} nodes: use the scheduler's engine (--launcher auto), or -n with one node's slots",
            p.world_size, p.nodes.size()));
      return c;
    case Engine::step:
      return c;
    case Engine::srun:
      srun_command(p, o, c);
      break;
    case Engine::mpirun:
      c.argv = mpirun_argv(a, p, o, find(o, "mpirun").value_or("mpirun"));
      break;
    case Engine::blaunch:
      blaunch_command(a, p, o, c);
      break;
    case Engine::jsrun:
      jsrun_command(p, o, c);
      break;
    case Engine::pbsdsh:
      pbsdsh_command(a, p, o, c);
      break;
  }
  append(c.argv, o.launcher_args);
  append(c.argv, c.wrapper);
  return c;
}

}  // namespace gpurun::launcher

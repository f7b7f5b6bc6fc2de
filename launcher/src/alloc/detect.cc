// detect.cc: scheduler sniffing and dispatch, plus the gpuq and bare-machine allocations.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "alloc/detect_internal.h"
#include "alloc/env_util.h"
#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/error.h"

namespace gpurun::launcher {

using detail::get;

const char* to_string(Scheduler s) {
  switch (s) {
    case Scheduler::slurm:
      return "slurm";
    case Scheduler::pbs:
      return "pbs";
    case Scheduler::lsf:
      return "lsf";
    case Scheduler::gpuq:
      return "gpuq";
    case Scheduler::local:
      return "local";
  }
  return "?";
}

Scheduler parse_scheduler(const std::string& name, const std::string& what) {
  for (Scheduler s :
       {Scheduler::slurm, Scheduler::pbs, Scheduler::lsf, Scheduler::gpuq, Scheduler::local})
    if (name == to_string(s)) return s;
  throw Error(
      fmt::format("{} '{}': expected one of auto, slurm, pbs, lsf, gpuq, local", what, name));
}

int Allocation::total_slots() const {
  return std::accumulate(nodes.begin(), nodes.end(), 0,
                         [](int a, const NodeAlloc& n) { return a + n.slots; });
}

std::vector<std::string> parse_gpu_list(const std::string& value) {
  std::vector<std::string> out;
  std::string v = detail::trim(value);
  if (v.empty() || v == "NoDevFiles") return out;
  std::size_t b = 0;
  while (b <= v.size()) {
    std::size_t e = v.find(',', b);
    if (e == std::string::npos) e = v.size();
    std::string id = detail::trim(v.substr(b, e - b));
    if (id.empty())
      throw Error(fmt::format("GPU list '{}': empty entry at position {}", value, out.size() + 1));
    out.push_back(id);
    b = e + 1;
  }
  return out;
}

Scheduler sniff_scheduler(const Env& env) {
  // gpuq sets SLURM_JOB_ID to its own job id for cluster scripts: a job whose Slurm id is its
  // gpuq id is gpuq's. Then Slurm: a gpuq or PBS job that calls salloc/srun is a Slurm job.
  if (auto q = get(env, "GPUQ_JOB_ID"); q && get(env, "SLURM_JOB_ID").value_or(*q) == *q)
    return Scheduler::gpuq;
  if (get(env, "SLURM_JOB_ID") || get(env, "SLURM_JOBID")) return Scheduler::slurm;
  if (get(env, "LSB_JOBID")) return Scheduler::lsf;
  if (get(env, "PBS_JOBID")) return Scheduler::pbs;
  if (get(env, "GPUQ_JOB_ID")) return Scheduler::gpuq;
  return Scheduler::local;
}

namespace {

Allocation read_allocation(const DetectInput& in, Scheduler s) {
  switch (s) {
    case Scheduler::slurm:
      return detail::detect_slurm(in);
    case Scheduler::pbs:
      return detail::detect_pbs(in);
    case Scheduler::lsf:
      return detail::detect_lsf(in);
    case Scheduler::gpuq:
      return detail::detect_gpuq(in);
    case Scheduler::local:
      return detail::detect_local(in);
  }
  throw Error("unknown scheduler");
}

}  // namespace

Allocation detect_allocation(const DetectInput& in, std::optional<Scheduler> forced) {
  Allocation a = read_allocation(in, forced ? *forced : sniff_scheduler(in.env));
  // Each reader names the variable at fault; this holds for all of them (a plan of no rank, or a
  // sum past an int, would be undefined further on).
  long total = 0;
  for (const auto& n : a.nodes) {
    if (n.slots < 1) throw Error(fmt::format("node {} has no task slot", detail::shown(n.host)));
    total += n.slots;
  }
  if (total > kMaxRanks)
    throw Error(fmt::format("{}: {} task slots in all; at most {} are planned",
                            a.sources.empty() ? "the allocation" : a.sources.front(), total,
                            kMaxRanks));
  return a;
}

namespace detail {

std::optional<std::vector<std::string>> visible_from_cvd(const Env& env) {
  auto cvd = get(env, "CUDA_VISIBLE_DEVICES");
  if (!cvd) return std::nullopt;
  return parse_gpu_list(*cvd);
}

// What gpuq sets for Slurm scripts from the job's #SBATCH lines: its tasks (-n: SLURM_NTASKS),
// CPUs per task (-c, when more than the default 1: SLURM_CPUS_PER_TASK) and end (--time:
// SLURM_JOB_END_TIME). gpurun then starts one rank per task or per GPU, whichever is more, each
// with its task's CPUs, and --checkpoint-before knows the end, as in a Slurm job.
void gpuq_tasks_and_end(const Env& env, Allocation& a) {
  if (auto n = get_count(env, "SLURM_NTASKS"); n && *n >= 1 && *n <= kMaxRanks) {
    a.job_tasks = static_cast<int>(*n);
    a.sources.push_back("SLURM_NTASKS");
  }
  if (auto c = get_count(env, "SLURM_CPUS_PER_TASK"); c && *c > 1 && *c <= kMaxNodeSlots) {
    a.cpus_per_task = static_cast<int>(*c);
    a.sources.push_back("SLURM_CPUS_PER_TASK");
  }
  // Under gpuq's srun (SLURM_STEP_ID), this gpurun is one task of the step, as under Slurm's: it
  // runs its own rank only (each of n tasks started max(n, GPUs) ranks).
  if (get(env, "SLURM_STEP_ID")) {
    const long tasks = get_count(env, "SLURM_STEP_NUM_TASKS").value_or(a.job_tasks.value_or(1));
    if (tasks < 1 || tasks > kMaxRanks)
      throw Error(fmt::format("SLURM_STEP_NUM_TASKS={}: expected 1 to {} tasks", tasks, kMaxRanks));
    const int n = static_cast<int>(tasks);
    a.job_tasks = n;
    a.nodes.front().slots = n;
    a.step_task = srun_step_task(env, {a.nodes.front().host}, {n}, n);
    a.sources.push_back("SLURM_STEP_ID");
  }
  read_job_end_time(env, a);
}

Allocation detect_gpuq(const DetectInput& in) {
  Allocation a;
  a.scheduler = Scheduler::gpuq;
  a.flavor = "gpuq";
  a.oversubscribe_ok = true;
  a.job_id = get(in.env, "GPUQ_JOB_ID");
  if (!a.job_id) throw Error("--scheduler gpuq: GPUQ_JOB_ID is not set (not inside a gpuq job?)");
  a.sources = {"GPUQ_JOB_ID", "GPUQ_GPUS", "CUDA_VISIBLE_DEVICES"};
  // As in Slurm, the first task's own id is the array's, which gpuq takes for every task:
  // <array>_<task> names this task alone (for --requeue's `gpuq requeue`).
  auto array = get(in.env, "GPUQ_ARRAY_JOB_ID");
  auto task = get(in.env, "GPUQ_ARRAY_TASK_ID");
  if (array && task)
    a.array_task = fmt::format("{}_{}", parse_count("GPUQ_ARRAY_JOB_ID", *array),
                               parse_count("GPUQ_ARRAY_TASK_ID", *task));
  // gpuq sets CUDA_VISIBLE_DEVICES to the job's real ids; GPUQ_GPUS holds the same ids.
  auto cvd = visible_from_cvd(in.env);
  auto qg = get(in.env, "GPUQ_GPUS");
  std::vector<std::string> qids = qg ? parse_gpu_list(*qg) : std::vector<std::string>{};
  if (cvd && qg && cvd->size() != qids.size())
    throw Error(fmt::format(
        "GPUQ_GPUS={} names {} GPUs but CUDA_VISIBLE_DEVICES={} names {}: the job's environment "
        "was changed after gpuq started it",
        *qg, qids.size(), *get(in.env, "CUDA_VISIBLE_DEVICES"), cvd->size()));
  a.local_gpu_ids = cvd ? *cvd : qids;
  int gpus = static_cast<int>(a.local_gpu_ids.size());
  a.nodes.push_back(NodeAlloc{in.hostname, std::max(gpus, in.cpu_count), gpus});
  a.this_host = in.hostname;
  gpuq_tasks_and_end(in.env, a);
  return a;
}

Allocation detect_local(const DetectInput& in) {
  Allocation a;
  a.scheduler = Scheduler::local;
  a.flavor = "local";
  a.oversubscribe_ok = true;
  if (auto cvd = visible_from_cvd(in.env)) {
    a.local_gpu_ids = *cvd;
    a.sources.push_back("CUDA_VISIBLE_DEVICES");
  } else {
    for (int i = 0; i < in.device_gpu_count; ++i) a.local_gpu_ids.push_back(std::to_string(i));
    a.sources.push_back("CUDA device count");
  }
  int gpus = static_cast<int>(a.local_gpu_ids.size());
  a.nodes.push_back(NodeAlloc{in.hostname, in.cpu_count, gpus});
  a.this_host = in.hostname;
  return a;
}

}  // namespace detail
}  // namespace gpurun::launcher

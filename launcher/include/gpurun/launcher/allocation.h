// allocation.h: what the scheduler gave this job, normalized across Slurm, PBS Pro/Torque, LSF,
// gpuq and the bare machine. Detection is a pure function of an injected environment and file
// reader (see DetectInput), so every scheduler is testable without one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpurun::launcher {

enum class Scheduler { slurm, pbs, lsf, gpuq, local };

const char* to_string(Scheduler s);
// Parses "slurm|pbs|lsf|gpuq|local"; throws Error naming `what` otherwise.
Scheduler parse_scheduler(const std::string& name, const std::string& what);

using Env = std::map<std::string, std::string>;

// Bounds on what an allocation may describe, far above any real job, so that a broken or hostile
// environment cannot overflow a count or grow gpurun's memory: task slots one node may have,
// ranks one plan may hold, bytes read from one host file or --env-file, a host name's length.
inline constexpr int kMaxNodeSlots = 1 << 16;
inline constexpr int kMaxRanks = 1 << 20;
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxHostName = 255;

struct NodeAlloc {
  std::string host;  // as the scheduler names it (what its launch engine accepts)
  int slots = 0;     // task slots the scheduler gave this node
  int gpus = 0;      // GPUs visible to the job on this node
  // The node's GPU ids where the scheduler names every node's (PBS_GPUFILE); empty: each node's
  // rank wrapper takes what it sees there (CUDA_VISIBLE_DEVICES, else every device).
  std::vector<std::string> gpu_ids = {};
};

// When gpurun itself runs as one task of a scheduler step (srun, jsrun), the step has already
// placed the ranks: gpurun only sets the rank environment and runs the program.
struct StepTask {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string engine;  // "srun" or "jsrun"
};

struct Allocation {
  Scheduler scheduler = Scheduler::local;
  std::string flavor;  // "Slurm", "PBS Pro", "Torque", "LSF", "gpuq", "local"
  std::optional<std::string> job_id;
  // A job array's task as the scheduler's commands name it (Slurm 123_4, LSF 123[4]): what
  // --requeue requeues, so that the array's other tasks keep running. Unset outside an array.
  std::optional<std::string> array_task;
  std::vector<NodeAlloc> nodes;  // in the scheduler's order; rank 0's node first
  // The visible GPU list of the node gpurun runs on, as CUDA_VISIBLE_DEVICES spells it
  // (indices, GPU-/MIG- UUIDs); positions in a rank plan index into each node's own such list.
  std::vector<std::string> local_gpu_ids;
  std::optional<std::string> this_host;  // the scheduler's name for this node, if known
  std::optional<int> cpus_per_task;      // from the scheduler, when it says
  std::optional<int> job_tasks;          // gpuq: the job's task count (-n), as it sets SLURM_NTASKS
  std::optional<std::int64_t> end_time;  // UNIX seconds when the job's time runs out
  std::optional<StepTask> step_task;     // set when running inside an srun/jsrun task
  bool oversubscribe_ok = false;         // local/gpuq: more ranks than CPUs is allowed
  bool host_file_interleaved = false;    // PBS_NODEFILE names a host's slots apart (a b a)
  std::vector<std::string> notes;        // facts worth telling the user (fallbacks, fixes)
  std::vector<std::string> sources;      // the variables/files the allocation came from

  int total_slots() const;
};

struct DetectInput {
  Env env;
  // Returns a file's contents, or nullopt when it cannot be opened; may throw Error saying why a
  // file that opens is refused (a folder, a device, larger than kMaxInputFileBytes).
  std::function<std::optional<std::string>(const std::string& path)> read_file;
  std::string hostname = "localhost";  // this machine's name (gethostname)
  int cpu_count = 1;                   // CPUs this process may run on
  int device_gpu_count = 0;            // CUDA devices the driver reports; 0 without a driver
  // `scontrol -d show job ID`'s text for a Slurm job, or nullopt (no scontrol, no such job, or
  // unset: another machine's job). Slurm's salloc shell has no GPU variable: the job's GPUs per
  // node are read from it.
  std::function<std::optional<std::string>(const std::string& job_id)> slurm_job_details;
};

// Picks the scheduler (or uses `forced`) and reads its allocation. Throws Error naming the
// variable or file at fault when the environment contradicts itself.
Allocation detect_allocation(const DetectInput& in, std::optional<Scheduler> forced = {});

// Which scheduler's variables are present, in order slurm, lsf, pbs, gpuq, else local.
Scheduler sniff_scheduler(const Env& env);

// Splits a CUDA_VISIBLE_DEVICES-style list; "" and "NoDevFiles" mean no GPU.
std::vector<std::string> parse_gpu_list(const std::string& value);

}  // namespace gpurun::launcher

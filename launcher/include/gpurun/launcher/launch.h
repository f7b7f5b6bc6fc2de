// launch.h: the engine command that starts the ranks (srun, mpirun, mpirun+blaunch, jsrun,
// pbsdsh, or gpurun's own fork) and the environment every rank gets. Pure: tool lookups are
// injected, so --dry-run goldens are stable.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/container.h"
#include "gpurun/launcher/plan.h"

namespace gpurun::launcher {

enum class Engine { srun, mpirun, blaunch, jsrun, pbsdsh, fork, step };
const char* to_string(Engine e);

struct LaunchOptions {
  std::string launcher = "auto";           // --launcher auto|srun|mpirun|blaunch|jsrun|pbsdsh|local
  std::vector<std::string> launcher_args;  // --launcher-args, split on blanks
  bool tag_output = false;
  std::string cpu_bind = "none";            // --cpu-bind: other than none, the engine must not bind
  std::string self_exe = "gpurun";          // what runs in each rank as the wrapper
  std::vector<std::string> program;         // PROGRAM ARGS
  bool as_root = false;                     // mpirun refuses root without --allow-run-as-root
  std::string control = "<set-at-launch>";  // host:port:token of gpurun's control socket
  std::string plan_text;                    // the rank table (encode_rank_table), for each wrapper
  // gpurun's PATH and LD_LIBRARY_PATH (nullopt: unset), handed to each wrapper, which gives them
  // to the program: engines change them (an mpirun run by its full path acts as --prefix and puts
  // its bin/ and lib/ first; pbsdsh gives the job's login environment).
  std::optional<std::string> user_path, user_ld_library_path;
  // Where a tool lives, or nullopt when it is not installed.
  std::function<std::optional<std::string>(const std::string&)> find_tool;
  // `srun --mpi=list` output split into plugin names; empty when unknown.
  std::vector<std::string> srun_mpi_plugins;
  // --container IMAGE (empty: none) and --container-runtime; `srun_pyxis`: srun has
  // --container-image. `workdir` is the folder pyxis mounts and enters.
  std::string container_image;
  std::string container_runtime = "auto";
  bool srun_pyxis = false;
  std::string workdir;
  // Nodes left out of this attempt (--nnodes): srun gets --exclude for them, so the step cannot
  // land there; the other engines are given only the plan's hosts.
  std::vector<std::string> exclude_hosts = {};
};

struct LaunchCommand {
  Engine engine = Engine::fork;
  std::vector<std::string> argv;  // empty for Engine::fork and Engine::step
  // What each rank runs: `gpurun _rank --plan P --control C [--path P] [--ld-library-path L]
  // [--container...] -- PROGRAM ARGS`
  // (the end of argv; Engine::fork starts it once per rank; empty for Engine::step).
  std::vector<std::string> wrapper;
  std::vector<std::pair<std::string, std::string>> engine_env;  // set for the engine process
  // srun's arbitrary distribution: one host per rank, written to a file named by SLURM_HOSTFILE.
  std::vector<std::string> slurm_hostfile;
  std::vector<std::string> notes;          // fallbacks taken, and why
  std::optional<ContainerSpec> container;  // --container, its runtime resolved
};

LaunchCommand build_launch(const Allocation& alloc, const RankPlan& plan, const LaunchOptions& o);

// The environment of one rank: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK, then what
// plan.contracts asks for (torch: GROUP_RANK MASTER_ADDR MASTER_PORT; tf: TF_CONFIG; jax:
// JAX_COORDINATOR_ADDRESS and, for a rank with GPUs, JAX_LOCAL_DEVICE_IDS), then
// CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER OMP_NUM_THREADS GPURUN_SCHEDULER GPURUN_JOB_ID
// GPURUN_STDOUT_TTY. `visible` is the node's visible GPU list
// (CUDA_VISIBLE_DEVICES as the scheduler set it there); nullopt prints positions instead (a node we
// cannot see).
std::vector<std::pair<std::string, std::string>> rank_environment(
    const RankPlan& plan, const RankEntry& r, Scheduler s, const std::optional<std::string>& job_id,
    const std::optional<std::vector<std::string>>& visible);

// What each rank's wrapper adds when it starts the program, beyond rank_environment(). The wrapper
// passes the real values; --dry-run passes what they will be ("<...>" where only the start knows).
struct StartValues {
  int restart = 0;                         // GPURUN_RESTART_COUNT
  std::optional<std::string> heartbeat;    // GPURUN_HEARTBEAT: the rank folder's file
  std::optional<std::string> iface;        // NCCL/GLOO_SOCKET_IFNAME: the route to MASTER_ADDR
  std::optional<std::string> python_dir;   // --hang-timeout: sitecustomize's folder, and
  std::optional<std::string> pystack_dir;  // where Python tracebacks are written
};
// In order: GPURUN_RESTART_COUNT, GPURUN_HEARTBEAT, PYTHONUNBUFFERED=1 (Python's output reaches
// gpurun line by line, not in 8 KiB blocks that look like a hang; unless `env` sets it), then
// NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (unless set), PYTHONPATH (the folder first, `env`'s
// after it) and GPURUN_PYSTACK_DIR. `env` is the environment the rank inherits.
std::vector<std::pair<std::string, std::string>> start_environment(const Env& env,
                                                                   const StartValues& v);

// Inside a scheduler's step (a.step_task set): this task's rank entry, numbered as the step
// numbers it, with its GPU positions (the whole visible list when the step bound the task to its
// own GPUs, as --gpus-per-task does).
RankEntry step_task_entry(const Allocation& a, const RankPlan& plan);
// Inside a step: whether it bound this task to its own GPUs (it sees fewer than its node has).
bool step_bound_task_gpus(const Allocation& a, const RankPlan& plan);
// A rank's wrapper started by gpurun's srun: whether srun bound this task to its own GPUs (the
// job's --gpus-per-task or --gpu-bind reach the step; slurmstepd says so in SLURMD_TRES_BIND),
// so that its `visible` GPUs are fewer than the `node_gpus` gpurun planned for its node.
bool srun_bound_task_gpus(const Env& task_env, std::size_t visible, int node_gpus);
// A task bound to its own GPUs: its share is all it sees, positions 0 to visible-1.
std::vector<int> task_gpu_share(std::size_t visible);

// Shell-quotes a word for printing a command a user can paste.
std::string shell_quote(const std::string& word);

}  // namespace gpurun::launcher

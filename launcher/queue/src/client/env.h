// env.h: the environment variables gpuq reads, by their literal names in one table, read once at
// the edge (queue_env()) into a config struct; nothing else in gpuq calls getenv.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace gpurun::queue {

struct QueueEnvVar {
  const char* name;
  const char* use;
};

inline constexpr QueueEnvVar kQueueEnvRead[] = {
    {"GPUQ_SOCKET", "the daemon's socket, for the client and a per-user daemon"},
    {"GPUQ_RETRY_SECONDS", "how long a client retries while the daemon is unreachable (0)"},
    {"XDG_RUNTIME_DIR", "where a per-user daemon's socket lives"},
    {"XDG_STATE_HOME", "where a per-user daemon keeps its state"},
    {"HOME", "~/.local/state/gpuq when XDG_STATE_HOME is unset"},
    {"GPURUN_NVIDIA_SMI", "an nvidia-smi for the daemon's GPU sampler to run instead of NVML"},
    {"PATH", "where the daemon finds nvidia-cuda-mps-control (--mps)"},
    {"SHELL", "what gpuq alloc runs when given no command"},
    {"GPUQ_JOB_ID", "srun: the job it runs a step of (unset: not in a job)"},
    {"SLURM_NTASKS", "srun: the job's tasks, its default -n"},
    {"SLURM_JOB_NODELIST", "srun: this host's name, for SLURM_STEP_NODELIST"},
};

struct QueueEnv {
  std::optional<std::string> socket;       // GPUQ_SOCKET
  double retry_seconds = 0;                // GPUQ_RETRY_SECONDS
  std::optional<std::string> runtime_dir;  // XDG_RUNTIME_DIR
  std::optional<std::string> state_home;   // XDG_STATE_HOME
  std::optional<std::string> home;         // HOME
  std::optional<std::string> nvidia_smi;   // GPURUN_NVIDIA_SMI
  std::optional<std::string> path;         // PATH
  std::optional<std::string> shell;        // SHELL
  std::optional<std::string> job_id;       // GPUQ_JOB_ID
  std::optional<std::string> ntasks;       // SLURM_NTASKS
  std::optional<std::string> nodelist;     // SLURM_JOB_NODELIST
  // The whole environment: `gpuq submit` hands it to the job, as sbatch does.
  std::map<std::string, std::string> all;
};

// From an environment map (empty values count as unset); throws std::invalid_argument naming a
// variable whose value does not parse.
QueueEnv queue_env_from(const std::map<std::string, std::string>& env);
// The process environment, read on first use; the same object after.
const QueueEnv& queue_env();

}  // namespace gpurun::queue

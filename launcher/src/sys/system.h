// system.h: the edge where gpurun reads the real machine: process environment, files, host
// name, CPUs, CUDA devices, tools on PATH. Everything past this edge works on injected values.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "gpurun/launcher/allocation.h"

namespace gpurun::launcher::sys {

Env process_env();
// A host file's or environment file's contents: a regular file or a pipe, at most
// kMaxInputFileBytes (a pipe silent for 10 s is given up); nullopt when it cannot be opened.
// Throws Error saying why a file that opens is refused: a folder, a device, too large.
std::optional<std::string> read_input_file(const std::string& path);
// Reads an environment dump (env_util.h's parse_env_text: env, export -p, declare -px) through
// read_input_file; a NUL byte refuses it.
Env read_env_file(const std::string& path);
int cpu_count();
// This machine's GPUs (gpuinfo::count_gpus: NVML, the nvidia-smi GPURUN_NVIDIA_SMI names or the
// one on PATH, the driver's /proc folders); 0 when none answers.
int gpu_count(const Env& env);
// A tool on env's PATH (and, for blaunch/jsrun, in LSF_BINDIR).
std::optional<std::string> find_tool(const Env& env, const std::string& name);
// Plugin names from `srun --mpi=list`; empty when srun is missing or says nothing.
std::vector<std::string> srun_mpi_plugins(const std::string& srun);
// Whether `srun --help` offers pyxis's --container-image.
bool srun_has_pyxis(const std::string& srun);
// `scontrol show job ID` (per_node: `scontrol -d show job ID`, with each node's CPUs and GRES)
// as it printed it; nullopt without scontrol on env's PATH, or when it fails (no such job).
enum class JobDetail { summary, per_node };
std::optional<std::string> scontrol_show_job(const Env& env, const std::string& job_id,
                                             JobDetail detail);
// The end time of a Slurm job from `scontrol show job ID` (EndTime=..., local time), for Slurm
// versions that do not export SLURM_JOB_END_TIME (22.05); nullopt when unknown or unlimited.
std::optional<std::int64_t> slurm_end_time(const Env& env, const std::string& job_id);
// Why `program` could not be executed with env's PATH: ENOENT (nowhere), EACCES (found but not
// an executable file); nullopt when it can.
std::optional<int> program_error(const Env& env, const std::string& program);
// What gpurun writes for one user (rank logs, a hang's stacks) no other user reads: files are
// created 0600, and the folders gpurun makes for them 0700 (those that exist keep their mode).
inline constexpr mode_t kPrivateFileMode = 0600;
// Makes `path` and its missing parents, each 0700; the error of the first that fails.
std::error_code make_private_dirs(const std::string& path);

// For a program name without '/' that PATH does not have: how to run the file of that name in
// the working folder ("./s1.py or python3 s1.py"), when there is one; "" otherwise.
std::string working_folder_hint(const std::string& program);
DetectInput detect_input(const Env& env);
std::string self_exe();
// The working folder (getcwd); throws Error when it cannot be had.
std::string current_dir();

}  // namespace gpurun::launcher::sys

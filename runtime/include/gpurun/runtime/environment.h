// environment.h: every environment variable the runtime's programs read, read once, at the
// program's edge (main, and the TrainConfig it makes: heartbeat_from_environment), into a
// RuntimeEnv that is passed down in configs. Nothing below the edge calls getenv. The table of
// literal names is in runtime/src/train/environment.cc; here, what each field holds and who
// sets it:
//   OMP_NUM_THREADS                     omp_num_threads: CPUs per rank (gpurun sets it)
//   GPURUN_STDOUT_TTY                   stdout_tty: 1 when gpurun's own stdout is a terminal
//   OMPI_COMM_WORLD_SIZE                under_open_mpi: Open MPI hands ranks a pty regardless
//   OPENBLAS_CORETYPE                   openblas_coretype: OpenBLAS' kernels, as the user pinned
//   GPURUN_HEARTBEAT                    heartbeat: the file gpurun watches for progress (also
//                                       TrainConfig::heartbeat_path's default)
//   GPURUN_RESTART_COUNT                restart_count: gpurun --max-restarts' attempt (0 first)
//   CUDA_VISIBLE_DEVICES                cuda_visible_devices: this rank's GPUs (for messages)
//   GPURUN_SCHEDULER                    under_gpurun: gpurun started this rank, so
//                                       CUDA_VISIBLE_DEVICES holds this rank's GPUs only
//   NCCL_MULTI_RANK_GPU_ENABLE          nccl_multi_rank_gpu: "1" lets NCCL put 2 ranks on a GPU
//   OMPI_MCA_osc_sm_backing_directory   shm_dir: where Open MPI backs shared windows
//   NODE_RANK                           node_index: this rank's node in gpurun's plan (the
//                                       hierarchical allreduce's nodes)
#pragma once

#include <map>
#include <string>

namespace gpurun::runtime {

struct RuntimeEnv {
  int omp_num_threads = 0;  // 0: unset or not a positive number
  int stdout_tty = -1;      // -1: unset
  bool under_open_mpi = false;
  std::string openblas_coretype;
  std::string heartbeat;
  int restart_count = 0;
  std::string cuda_visible_devices;  // "<unset>" when unset
  bool under_gpurun = false;
  bool nccl_multi_rank_gpu = false;
  std::string shm_dir = "/dev/shm";
  int node_index = -1;  // -1: unset (not under gpurun)
};

// From an explicit environment (tests), and from this process's (the edge).
RuntimeEnv runtime_env(const std::map<std::string, std::string>& env);
RuntimeEnv runtime_env_from_process();
// This process's GPURUN_HEARTBEAT ("" when unset): TrainConfig's default heartbeat_path.
std::string heartbeat_from_environment();

}  // namespace gpurun::runtime

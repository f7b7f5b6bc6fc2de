// environment.cc: the runtime's table of environment variables (environment.h) and the only
// place the runtime reads the process environment.
#include "gpurun/runtime/environment.h"

#include <cstdlib>

namespace gpurun::runtime {
namespace {

int positive_int(const std::string& v) {
  const int n = std::atoi(v.c_str());
  return n > 0 ? n : 0;
}

struct Var {
  const char* name;
  void (*set)(RuntimeEnv&, const std::string&);
};

// The table: every variable the runtime's programs read.
const Var kVars[] = {
    {"OMP_NUM_THREADS",
     [](RuntimeEnv& e, const std::string& v) { e.omp_num_threads = positive_int(v); }},
    {"GPURUN_STDOUT_TTY",
     [](RuntimeEnv& e, const std::string& v) { e.stdout_tty = v == "1" ? 1 : 0; }},
    {"OMPI_COMM_WORLD_SIZE", [](RuntimeEnv& e, const std::string&) { e.under_open_mpi = true; }},
    {"OPENBLAS_CORETYPE", [](RuntimeEnv& e, const std::string& v) { e.openblas_coretype = v; }},
    {"GPURUN_HEARTBEAT", [](RuntimeEnv& e, const std::string& v) { e.heartbeat = v; }},
    {"GPURUN_RESTART_COUNT",
     [](RuntimeEnv& e, const std::string& v) { e.restart_count = positive_int(v); }},
    {"CUDA_VISIBLE_DEVICES",
     [](RuntimeEnv& e, const std::string& v) { e.cuda_visible_devices = v; }},
    {"GPURUN_SCHEDULER", [](RuntimeEnv& e, const std::string&) { e.under_gpurun = true; }},
    {"NCCL_MULTI_RANK_GPU_ENABLE",
     [](RuntimeEnv& e, const std::string& v) { e.nccl_multi_rank_gpu = v == "1"; }},
    {"NODE_RANK",
     [](RuntimeEnv& e, const std::string& v) {
       const int n = positive_int(v);  // 0 for "0" and for what is no number
       e.node_index = n > 0 ? n : (v == "0" ? 0 : -1);
     }},
    {"OMPI_MCA_osc_sm_backing_directory",
     [](RuntimeEnv& e, const std::string& v) {
       if (!v.empty()) e.shm_dir = v;
     }},
};

}  // namespace

RuntimeEnv runtime_env(const std::map<std::string, std::string>& env) {
  RuntimeEnv e;
  e.cuda_visible_devices = "<unset>";
  for (const Var& v : kVars) {
    const auto it = env.find(v.name);
    if (it != env.end()) v.set(e, it->second);
  }
  return e;
}

RuntimeEnv runtime_env_from_process() {
  std::map<std::string, std::string> env;
  for (const Var& v : kVars) {
    if (const char* value = std::getenv(v.name)) env[v.name] = value;
  }
  return runtime_env(env);
}

std::string heartbeat_from_environment() {
  return runtime_env_from_process().heartbeat;
}

}  // namespace gpurun::runtime

// env.cc: gpuq's edge to the process environment (env.h).
#include "client/env.h"

#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>

extern char** environ;

namespace gpurun::queue {
namespace {

std::optional<std::string> get(const std::map<std::string, std::string>& env, const char* k) {
  auto it = env.find(k);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

}  // namespace

QueueEnv queue_env_from(const std::map<std::string, std::string>& env) {
  QueueEnv q;
  q.socket = get(env, "GPUQ_SOCKET");
  q.runtime_dir = get(env, "XDG_RUNTIME_DIR");
  q.state_home = get(env, "XDG_STATE_HOME");
  q.home = get(env, "HOME");
  q.nvidia_smi = get(env, "GPURUN_NVIDIA_SMI");
  q.path = get(env, "PATH");
  q.shell = get(env, "SHELL");
  q.job_id = get(env, "GPUQ_JOB_ID");
  q.ntasks = get(env, "SLURM_NTASKS");
  q.nodelist = get(env, "SLURM_JOB_NODELIST");
  if (auto r = get(env, "GPUQ_RETRY_SECONDS")) {
    char* end = nullptr;
    q.retry_seconds = std::strtod(r->c_str(), &end);
    if (end == r->c_str() || *end != '\0' || q.retry_seconds < 0)
      throw std::invalid_argument(
          fmt::format("GPUQ_RETRY_SECONDS='{}': expected a number of seconds >= 0", *r));
  }
  q.all = env;
  return q;
}

const QueueEnv& queue_env() {
  static const QueueEnv env = [] {
    std::map<std::string, std::string> m;
    for (char** e = environ; e && *e; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    return queue_env_from(m);
  }();
  return env;
}

}  // namespace gpurun::queue

// mps.cc: see mps.h.
#include "daemon/mps.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "daemon/mailer.h"
#include "gpurun/common/posix.h"

extern char** environ;

namespace gpurun::queue {

Mps::Mps(std::string control, std::string dir) : control_(std::move(control)), dir_(std::move(dir)) {}

std::string Mps::pipe_dir(int gpu) const { return fmt::format("{}/{}/pipe", dir_, gpu); }
std::string Mps::log_dir(int gpu) const { return fmt::format("{}/{}/log", dir_, gpu); }

std::map<std::string, std::string> Mps::job_env(int gpu, int percent) const {
  return {{"CUDA_MPS_PIPE_DIRECTORY", pipe_dir(gpu)},
          {"CUDA_MPS_LOG_DIRECTORY", log_dir(gpu)},
          {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(percent)}};
}

void Mps::start(int gpu) const {
  // The jobs (other users, when the daemon is root's) reach the pipes: 0755 directories.
  for (const std::string& d : {dir_, fmt::format("{}/{}", dir_, gpu), pipe_dir(gpu), log_dir(gpu)})
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST)
      fmt::print(stderr, "gpuq daemon: MPS for GPU {}: cannot make {}: {}\n", gpu, d,
                 strerror(errno));
  if (spawn(gpu, "-d", ""))
    fmt::print(stderr, "gpuq daemon: GPU {}: MPS control daemon started ({} -d)\n", gpu, control_);
}

void Mps::stop(int gpu) const {
  if (spawn(gpu, nullptr, "quit\n"))
    fmt::print(stderr, "gpuq daemon: GPU {}: MPS control daemon told to quit\n", gpu);
}

// control_ [arg], with the GPU's MPS variables and `input` on its standard input (from an unlinked
// file under dir_; /dev/null when empty). Not waited for: the daemon reaps nothing (SIGCHLD is
// ignored).
bool Mps::spawn(int gpu, const char* arg, const std::string& input) const {
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) env_text.emplace_back(*e);
  env_text.push_back(fmt::format("CUDA_VISIBLE_DEVICES={}", gpu));
  for (const auto& [k, v] : job_env(gpu, 100))
    if (k != "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") env_text.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  common::Fd in;
  try {
    in = unlinked_input(dir_, input);
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpuq daemon: MPS for GPU {}: {}\n", gpu, e.what());
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in.get(), 0);
  char* argv[] = {const_cast<char*>(control_.c_str()), const_cast<char*>(arg), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, control_.c_str(), &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    fmt::print(stderr, "gpuq daemon: MPS for GPU {}: cannot run {}: {}\n", gpu, control_,
               strerror(rc));
  return rc == 0;
}

}  // namespace gpurun::queue

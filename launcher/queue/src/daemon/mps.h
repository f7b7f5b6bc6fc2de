// mps.h: NVIDIA's Multi-Process Service for shared GPUs (gpuq daemon --mps). While shard jobs
// share a GPU, one MPS control daemon runs for it (`nvidia-cuda-mps-control -d` with
// CUDA_VISIBLE_DEVICES set to that GPU), with its pipe and log directories under the state dir;
// the jobs get those directories and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, their share of the GPU's
// SMs. When the last shard job on the GPU ends, the daemon is told `quit` on its standard input,
// as NVIDIA's documentation shows. Neither call is waited for (the tool daemonizes; a failure to
// start it is a line in the daemon's log and never affects a job). An MPS server serves one Unix
// user at a time: shard jobs of another user on the same GPU wait inside CUDA until it is free
// (NVIDIA's MPS documentation, "Limitations"), which is why MPS is an option, not the default.
#pragma once

#include <map>
#include <string>

namespace gpurun::queue {

class Mps {
 public:
  // control: the nvidia-cuda-mps-control to run ("" = MPS off); dir: where each GPU's pipe and
  // log directories go.
  Mps(std::string control, std::string dir);
  bool on() const { return !control_.empty(); }
  void start(int gpu) const;
  void stop(int gpu) const;
  // What a shard job holding `percent` of `gpu` adds to its environment.
  std::map<std::string, std::string> job_env(int gpu, int percent) const;

 private:
  std::string pipe_dir(int gpu) const;
  std::string log_dir(int gpu) const;
  bool spawn(int gpu, const char* arg, const std::string& input) const;

  std::string control_, dir_;
};

}  // namespace gpurun::queue

// rank_info.cc: the smallest gpurun program. Prints what gpurun told this rank (the torchrun
// env:// contract) and checks it is self-consistent. Run: gpurun -n 2 -- rank_info
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}
}  // namespace

int main() {
  const char* required[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                            "NODE_RANK",   "MASTER_ADDR", "MASTER_PORT"};
  for (const char* k : required) {
    if (env(k).empty()) {
      std::fprintf(stderr, "rank_info: %s is not set: run me under gpurun (gpurun -n 2 -- rank_info)\n", k);
      return 2;
    }
  }
  int rank = std::atoi(env("RANK").c_str()), world = std::atoi(env("WORLD_SIZE").c_str());
  if (rank < 0 || rank >= world) {
    std::fprintf(stderr, "rank_info: RANK=%d outside WORLD_SIZE=%d\n", rank, world);
    return 1;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string cvd = env("CUDA_VISIBLE_DEVICES");
  std::printf("rank %d of %d  local %s/%s  node %s  on %s  GPUs [%s]  threads %s  master %s:%s  (%s)\n",
              rank, world, env("LOCAL_RANK").c_str(), env("LOCAL_WORLD_SIZE").c_str(),
              env("NODE_RANK").c_str(), host, cvd.empty() ? "none" : cvd.c_str(),
              env("OMP_NUM_THREADS").c_str(), env("MASTER_ADDR").c_str(), env("MASTER_PORT").c_str(),
              env("GPURUN_SCHEDULER").c_str());
  return 0;
}

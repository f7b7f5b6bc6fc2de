// consumer_runtime.cc: links the installed runtime (and through it the kernels, OpenBLAS, zlib,
// MPI) and shards a dataset the way mnist_cnn does.
#include <cstdio>

#include "gpurun/kernels/device_probe.h"
#include "gpurun/runtime/sampler.h"

int main() {
  auto a = gpurun::runtime::eval_shard(10, 2, 0), b = gpurun::runtime::eval_shard(10, 2, 1);
  std::printf("%zu+%zu images, %d CUDA devices\n", a.size(), b.size(),
              gpurun::kernels::cuda_device_count());
  return a.size() + b.size() == 10 ? 0 : 1;
}

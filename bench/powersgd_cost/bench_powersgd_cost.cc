// bench_powersgd_cost: the CPU time of PowerSGD's compression (runtime/src/cpu/powersgd.h) for
// mnist_cnn's gradient, one thread, with a sum that does no communication, beside the time of one
// pass a += b over the same 11 MB: the memory floor any exchange of the whole gradient pays per
// pass. On one core a node (bench/two_node_link) this time is on the step's critical path: it is
// why PowerSGD does not reach the two-node target at 10 Gbit/s there. Run it on a quiet machine:
//   taskset -c 0 build/bench/powersgd_cost/bench_powersgd_cost [--rank R] [--repeats N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_timing.h"
#include "cpu/powersgd.h"

using gpurun::runtime::cpu::LowRankMatrix;
using gpurun::runtime::cpu::PowerSgd;

int main(int argc, char** argv) {
  int rank = 4, repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rank"))
      rank = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--rank R] [--repeats N]\n", argv[0]);
      return 2;
    }
  }
  // mnist_cnn's gradient: conv 3x3x32 + 32, Dense 21,632 -> 128 + 128, Dense 128 -> 10 + 10.
  const std::size_t dense1 = 352, dense2 = dense1 + 21632 * 128 + 128, total = dense2 + 1280 + 10;
  PowerSgd psgd({{dense1, 128, 21632}, {dense2, 10, 128}}, total, rank, 2, 7);
  std::vector<float> grads(total), fresh(total), other(total, 0.5f);
  unsigned seed = 1;
  for (auto& x : fresh) x = float(int((seed = seed * 1664525u + 1013904223u) >> 9) % 2001) / 1e3f;
  const auto no_comm = [](float*, std::size_t) {};
  const double copy = best_ms(repeats, [&] { grads = fresh; });
  const double step = best_ms(repeats, [&] {
    grads = fresh;
    psgd.allreduce_sum(no_comm, grads.data());
  });
  const double pass = best_ms(repeats, [&] {
    for (std::size_t i = 0; i < total; ++i) grads[i] += other[i];
  });
  std::printf(
      "%s\ncompression %.2f ms a step; one pass a += b over the %.2f MB gradient %.2f ms "
      "(%.1f passes)\n",
      psgd.summary().c_str(), step - copy, 4e-6 * double(total), pass, (step - copy) / pass);
}

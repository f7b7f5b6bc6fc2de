// allreduce_test.cc: the Open MPI process group, run by CTest under `mpirun -n 2` and as one
// plain process (singleton init). In the nccl-tests manner the inputs are chosen so the exact
// sum is known: rank r contributes (r + 1) * (i % 7), small integers that floats add exactly.
#include <cstdio>
#include <exception>
#include <vector>

#include "gpurun/runtime/process_group.h"

int main() {
  try {
    auto pg = gpurun::runtime::make_process_group();
    const int w = pg->size(), r = pg->rank();
    const double rank_sum = w * (w + 1) / 2.0;
    std::size_t wrong = 0;
    for (std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(2770638)}) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = float((r + 1) * (i % 7));
      pg->allreduce_sum(v.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        if (v[i] != float(rank_sum * (i % 7))) ++wrong;
    }
    double d[3] = {r + 0.5, 1.0, -2.0 * r};
    pg->allreduce_sum(d, 3);
    if (d[0] != rank_sum - w + 0.5 * w || d[1] != w) ++wrong;
    // Broadcast from rank 0 overwrites every other rank's buffer.
    std::vector<float> b(100, float(r));
    if (r == 0) b.assign(100, 42.0f);
    pg->broadcast(b.data(), b.size() * sizeof(float), 0);
    for (float x : b)
      if (x != 42.0f) ++wrong;
    pg->barrier();
    std::printf("rank %d of %d (%s, local %d/%d): %zu wrong values\n", r, w, pg->backend().c_str(),
                pg->local_rank(), pg->local_size(), wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_test: %s\n", e.what());
    return 1;
  }
}

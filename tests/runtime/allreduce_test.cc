// allreduce_test.cc: the Open MPI process group, run by CTest under `mpirun -n 2` and as one
// plain process (singleton init). In the nccl-tests manner the inputs are chosen so the exact
// sum is known: rank r contributes (r + 1) * (i % 7), small integers that floats add exactly.
// Last, the bounded sums: equal to the plain ones, and on 2 ranks a double sum rank 1 joins only
// after rank 0's timeout throws CollectiveTimeout naming the sum, its type and the rank.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "gpurun/runtime/process_group.h"
#include "group/bf16.h"

// Rank 1 joins a double sum 2 s late; rank 0's bound of 0.5 s must end it first, by name.
std::size_t late_peer_times_out(gpurun::runtime::ProcessGroup& pg) {
  double d[3] = {1, 2, 3};
  if (pg.rank() == 1) {
    ::sleep(2);
    // Non-blocking, as rank 0's (a blocking collective does not match a non-blocking one): the
    // abandoned sum completes in rank 0's next MPI calls, so both ranks finish cleanly.
    pg.allreduce_sum_within(d, 3, 30.0, "the late sum");
    return 0;
  }
  try {
    pg.allreduce_sum_within(d, 3, 0.5, "the losses and the stop vote");
  } catch (const gpurun::runtime::CollectiveTimeout& e) {
    const std::string m = e.what();
    const bool named = m.find("MPI_Allreduce of 3 doubles (the losses and the stop vote)") == 0 &&
                       m.find("timeout of 0.5 s on rank 0") != std::string::npos;
    std::printf("rank 0: %s\n", m.c_str());
    return named ? 0 : 1;
  }
  std::fprintf(stderr, "rank 0: the sum rank 1 joined 2 s late did not time out after 0.5 s\n");
  return 1;
}

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
    // bfloat16: small integers are exact. Rank 0's 1 + 2^-7 and rank 1's 1 sum to 2 + 2^-7,
    // halfway between two bfloat16s (2 and 2 + 2^-6): to even, 2.
    for (std::size_t n : {std::size_t(1), std::size_t(2770638)}) {
      std::vector<std::uint16_t> h(n);
      for (std::size_t i = 0; i < n; ++i) h[i] = gpurun::runtime::to_bf16(float((r + 1) * (i % 7)));
      pg->allreduce_sum_bf16(h.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        if (gpurun::runtime::from_bf16(h[i]) != float(rank_sum * (i % 7))) ++wrong;
    }
    // Sums that round: every rank ends with rank 0's bits (MPI may add in any order per rank).
    std::vector<std::uint16_t> odd(1000);
    for (std::size_t i = 0; i < odd.size(); ++i)
      odd[i] = gpurun::runtime::to_bf16(1.0f + float((std::size_t(r) * 37 + i) % 97) / 97.0f);
    pg->allreduce_sum_bf16(odd.data(), odd.size());
    std::vector<std::uint16_t> first = odd;
    pg->broadcast(first.data(), first.size() * sizeof(std::uint16_t), 0);
    if (first != odd) ++wrong;
    std::uint16_t tie = r == 0 ? 0x3f81 : 0x3f80;
    pg->allreduce_sum_bf16(&tie, 1);
    if (w == 2 && tie != 0x4000) ++wrong;
    if (w == 1 && tie != 0x3f81) ++wrong;
    double d[3] = {r + 0.5, 1.0, -2.0 * r};
    pg->allreduce_sum(d, 3);
    if (d[0] != rank_sum - w + 0.5 * w || d[1] != w) ++wrong;
    // Broadcast from rank 0 overwrites every other rank's buffer.
    std::vector<float> b(100, float(r));
    if (r == 0) b.assign(100, 42.0f);
    pg->broadcast(b.data(), b.size() * sizeof(float), 0);
    for (float x : b)
      if (x != 42.0f) ++wrong;
    std::vector<float> f(1000);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = float((r + 1) * (i % 7));
    pg->allreduce_sum_within(f.data(), f.size(), 30.0, "a bounded float sum");
    for (std::size_t i = 0; i < f.size(); ++i)
      if (f[i] != float(rank_sum * (i % 7))) ++wrong;
    double bd[2] = {double(r + 1), 0.25};
    pg->allreduce_sum_within(bd, 2, 30.0, "a bounded double sum");
    if (bd[0] != rank_sum || bd[1] != 0.25 * w) ++wrong;
    if (w == 2) wrong += late_peer_times_out(*pg);
    pg->barrier();
    std::printf("rank %d of %d (%s, local %d/%d): %zu wrong values\n", r, w, pg->backend().c_str(),
                pg->local_rank(), pg->local_size(), wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_test: %s\n", e.what());
    return 1;
  }
}

// nccl_allreduce_test.cc: the runtime's NCCL communicator (nccl_comm.h, the one the CUDA backend
// sums gradients with), nccl-tests style: inputs whose sums are exact in FP32 (small integers),
// in place and out of place, counting wrong values, for sizes from 1 float to the MNIST CNN's
// whole gradient buffer. Run alone and under `mpirun -n 2`: the ranks share one communicator
// when NCCL can serve them (one GPU each, or NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 on
// one GPU); where it cannot (two ranks on one GPU with an older NCCL, which refuses with
// "Duplicate GPU detected") each rank tests a communicator of its own. Exits 77 (skipped) without
// a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "gpu_test_util.h"
#include "gpurun/runtime/process_group.h"
#include "nccl_comm.h"

namespace {

namespace rt = gpurun::runtime;
namespace rc = gpurun::runtime::cuda;
using gpurun::testing::count_wrong_sums;
using gpurun::testing::DeviceVec;
using gpurun::testing::exact_sum_input;

rt::ProcessGroup* g_world = nullptr;

TEST(NcclAllreduce, ExactSumsInPlaceAndOutOfPlace) {
  int ndev = 0;
  ASSERT_EQ(cudaGetDeviceCount(&ndev), cudaSuccess);
  const int dev = g_world->local_rank() % ndev;
  ASSERT_EQ(cudaSetDevice(dev), cudaSuccess);
  std::string why;
  const bool shared = rc::choose_backend(*g_world, dev, true, &why) == rc::AllreduceBackend::kNccl;
  auto self = rt::make_single_process_group();
  rt::ProcessGroup& pg = g_world->size() == 1 || shared ? *g_world : *self;
  if (g_world->rank() == 0) {
    std::printf("communicator: %d rank(s)%s%s\n", pg.size(), why.empty() ? "" : "; ", why.c_str());
  }
  rc::NcclComm comm(pg, 60.0);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (const std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(2770640) + 4}) {
    std::vector<float> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = exact_sum_input(pg.rank(), i);
    DeviceVec<float> a(h), out(n);
    comm.allreduce_sum(a.get(), out.get(), n, s);  // out of place
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(count_wrong_sums(out.host(), pg.size()), 0u) << n << " floats, out of place";
    const std::vector<float> in = a.host();
    std::size_t changed = 0;
    for (std::size_t i = 0; i < n; ++i) changed += in[i] != h[i];
    EXPECT_EQ(changed, 0u) << n << " floats: out of place modified its input";
    comm.allreduce_sum(a.get(), a.get(), n, s);  // in place
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(count_wrong_sums(a.host(), pg.size()), 0u) << n << " floats, in place";
  }
  cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  gpurun::testing::exit_77_without_a_device();
  ::testing::InitGoogleTest(&argc, argv);
  auto world = rt::make_process_group();
  g_world = world.get();
  if (world->rank() != 0) {  // only rank 0 prints gtest's report; every rank runs the tests
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  float bad = rc != 0 ? 1.0f : 0.0f;
  world->allreduce_sum(&bad, 1);  // any rank failing fails the run
  return bad > 0 ? 1 : 0;
}

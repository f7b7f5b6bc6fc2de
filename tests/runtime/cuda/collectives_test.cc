// collectives_test.cc: the CUDA backend's collectives across processes, run as
//   mpirun -n 2 build/tests/runtime/cuda/collectives_test
// (ctest: runtime_cuda_collectives_mpi_2). Pins: (1) every rank picks the same allreduce backend
// (NCCL, or the host-staged MPI path when two ranks share one GPU, as on a one-GPU machine) and
// that backend sums exactly, in place and out of place; (2) the watchdog: when a rank never joins
// the NCCL communicator, the others fail within --comm-timeout with a message naming rank and host
// instead of hanging. Every rank exits 77 (skipped) without a CUDA device, before MPI starts.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "gpurun/runtime/process_group.h"
#include "nccl_comm.h"

namespace {

using gpurun::runtime::ProcessGroup;
using gpurun::runtime::cuda::AllreduceBackend;
namespace rc = gpurun::runtime::cuda;
using gpurun::testing::count_wrong_sums;
using gpurun::testing::exact_sum_input;

ProcessGroup* g_pg = nullptr;

int my_device() {
  int n = 0;
  cudaGetDeviceCount(&n);
  const int dev = n > 1 ? g_pg->local_rank() % n : 0;
  cudaSetDevice(dev);
  return dev;
}

TEST(GpuCollectives, BackendAgreesAndSumsExactly) {
  const int dev = my_device();
  std::string why;
  const AllreduceBackend b = rc::choose_backend(*g_pg, dev, false, &why);
  // Every rank must have chosen the same backend.
  float mine = float(int(b)), sum = mine;
  g_pg->allreduce_sum(&sum, 1);
  ASSERT_EQ(sum, mine * float(g_pg->size())) << "ranks disagree on the backend: " << why;
  if (g_pg->size() == 1) {
    EXPECT_EQ(b, AllreduceBackend::kNone);
    return;
  }
  if (g_pg->rank() == 0) std::printf("backend: %s %s\n", rc::to_string(b), why.c_str());
  const std::size_t n = 2770640 + 4;
  std::vector<float> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = exact_sum_input(g_pg->rank(), i);
  if (b == AllreduceBackend::kHostMpi) {
    // The host-staged path: device -> host, MPI sum, host -> device.
    gpurun::testing::DeviceVec<float> d(h);
    std::vector<float> stage = d.host();
    g_pg->allreduce_sum(stage.data(), n);
    ASSERT_EQ(cudaMemcpy(d.get(), stage.data(), n * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(count_wrong_sums(d.host(), g_pg->size()), 0u);
    return;
  }
  rc::NcclComm comm(*g_pg, 60.0);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  gpurun::testing::DeviceVec<float> a(h), out(n);
  comm.allreduce_sum(a.get(), out.get(), n, s);  // out of place
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(count_wrong_sums(out.host(), g_pg->size()), 0u) << "out of place";
  std::size_t changed = 0;
  const auto in = a.host();
  for (std::size_t i = 0; i < n; ++i) changed += in[i] != h[i];
  EXPECT_EQ(changed, 0u) << "out of place modified its input";
  comm.allreduce_sum(a.get(), a.get(), n, s);  // in place
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(count_wrong_sums(a.host(), g_pg->size()), 0u) << "in place";
  cudaStreamDestroy(s);
}

// Rank 1 receives the unique id like everyone else and then never calls ncclCommInitRank: it
// sleeps past the timeout. Rank 0 must get an exception within the timeout (plus slack), naming
// itself and its host. (No second GPU is needed: the duplicate-GPU check NCCL makes happens only
// once every rank has joined, which here never happens.)
TEST(GpuCollectives, WatchdogFailsWhenARankNeverJoins) {
  ASSERT_GE(g_pg->size(), 2) << "run it under mpirun -n 2 (ctest does)";
  my_device();
  constexpr double kTimeout = 3.0;
  if (g_pg->rank() == 1) {
    ncclUniqueId id;
    g_pg->broadcast(&id, sizeof id, 0);  // the id rank 0 sends, then silence
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTimeout));
  } else if (g_pg->rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    try {
      rc::NcclComm comm(*g_pg, kTimeout);
      FAIL() << "NCCL init succeeded although rank 1 never joined";
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("watchdog after %.2f s: %s\n", took, msg.c_str());
    EXPECT_LT(took, kTimeout + 5.0) << msg;
    EXPECT_GE(took, kTimeout * 0.9) << msg;
    EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    EXPECT_NE(msg.find(host), std::string::npos) << msg;
  }
  g_pg->barrier();
}

}  // namespace

int main(int argc, char** argv) {
  gpurun::testing::exit_77_without_a_device();
  ::testing::InitGoogleTest(&argc, argv);
  auto pg = gpurun::runtime::make_process_group();
  g_pg = pg.get();
  // Only rank 0 prints gtest's report; every rank runs the same tests.
  if (pg->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  float bad = rc != 0 ? 1.0f : 0.0f;
  pg->allreduce_sum(&bad, 1);  // any rank failing fails the run
  return bad > 0 ? 1 : 0;
}

// nccl_allreduce_test.cc: NCCL allreduce in one process over every visible GPU (one rank per
// GPU, ncclCommInitAll), nccl-tests style: inputs whose sums are exact in FP32 (small integers),
// in place and out of place, counting wrong values; sizes from 1 float to the MNIST CNN's whole
// gradient buffer. On a one-GPU machine this is a one-rank communicator (the multi-rank paths run
// in gpu_mpi_test under mpirun). Skips without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <vector>

#include "gpu_test_util.h"

namespace {

// Rank r's value at i: (r + 1) * (i % 97); the sum over n ranks is (i % 97) * n(n+1)/2, an
// integer below 2^24 for n <= 64, so FP32 addition is exact in any order.
float value(int rank, std::size_t i) {
  return float((rank + 1) * int(i % 97));
}

std::size_t count_wrong(const std::vector<float>& got, int nranks) {
  std::size_t bad = 0;
  const float tri = float(nranks * (nranks + 1) / 2);
  for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != float(i % 97) * tri;
  return bad;
}

TEST(NcclAllreduce, ExactSumsInPlaceAndOutOfPlace) {
  GPURUN_REQUIRE_GPU();
  int ndev = 0;
  ASSERT_EQ(cudaGetDeviceCount(&ndev), cudaSuccess);
  std::vector<ncclComm_t> comms(ndev);
  std::vector<int> devs(ndev);
  for (int d = 0; d < ndev; ++d) devs[d] = d;
  ASSERT_EQ(ncclCommInitAll(comms.data(), ndev, devs.data()), ncclSuccess);
  for (const std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(2770640) + 4}) {
    for (const bool in_place : {true, false}) {
      std::vector<float*> send(ndev), recv(ndev);
      std::vector<cudaStream_t> streams(ndev);
      for (int d = 0; d < ndev; ++d) {
        ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
        ASSERT_EQ(cudaStreamCreate(&streams[d]), cudaSuccess);
        std::vector<float> h(n);
        for (std::size_t i = 0; i < n; ++i) h[i] = value(d, i);
        ASSERT_EQ(cudaMalloc(&send[d], n * sizeof(float)), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(send[d], h.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                  cudaSuccess);
        recv[d] = send[d];
        if (!in_place) {
          ASSERT_EQ(cudaMalloc(&recv[d], n * sizeof(float)), cudaSuccess);
          ASSERT_EQ(cudaMemset(recv[d], 0xFF, n * sizeof(float)), cudaSuccess);  // NaN garbage
        }
      }
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (int d = 0; d < ndev; ++d)
        ASSERT_EQ(ncclAllReduce(send[d], recv[d], n, ncclFloat32, ncclSum, comms[d], streams[d]),
                  ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
      for (int d = 0; d < ndev; ++d) {
        ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(streams[d]), cudaSuccess);
        std::vector<float> got(n);
        ASSERT_EQ(cudaMemcpy(got.data(), recv[d], n * sizeof(float), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        EXPECT_EQ(count_wrong(got, ndev), 0u) << "device " << d << ", " << n << " floats, "
                                              << (in_place ? "in place" : "out of place");
        if (!in_place) {
          // Out of place must leave the input alone.
          ASSERT_EQ(cudaMemcpy(got.data(), send[d], n * sizeof(float), cudaMemcpyDeviceToHost),
                    cudaSuccess);
          std::size_t changed = 0;
          for (std::size_t i = 0; i < n; ++i) changed += got[i] != value(d, i);
          EXPECT_EQ(changed, 0u) << "input modified on device " << d;
          cudaFree(recv[d]);
        }
        cudaFree(send[d]);
        cudaStreamDestroy(streams[d]);
      }
    }
  }
  for (auto c : comms) ncclCommDestroy(c);
}

}  // namespace

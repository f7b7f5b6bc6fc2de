// rules_test.cc: the stand-in refuses what the real CUDA, cuBLAS, cuDNN and NCCL refuse, with
// their error codes, and catches what a GPU would turn into a fault (tests/standin/README.md).
// Each case is a mistake the project's code could make; a stand-in that let it through would
// let the GPU tests pass on code that fails on a GPU. Faults are sticky per device, as on a GPU:
// each fault case uses a device of its own (GPURUN_STANDIN_DEVICES=8, set by ctest).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_next_device = 1;  // device 0 stays healthy for the cases that expect success

// A fresh device for a case that faults it (a fault is sticky, as on a GPU).
int fresh_device() {
  const int d = g_next_device++;
  EXPECT_EQ(cudaSetDevice(d), cudaSuccess);
  return d;
}

__global__ void fill(float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 1.0f;
}

__global__ void early_return_before_barrier(float* y) {
  __shared__ float s[64];
  s[threadIdx.x] = 1.0f;
  if (threadIdx.x == 3) return;
  __syncthreads();
  y[threadIdx.x] = s[63 - threadIdx.x];
}

__global__ void half_warp_shuffle(float* y) {
  float v = 1.0f;
  if (threadIdx.x < 16) v += __shfl_down_sync(0xffffffffu, v, 1);  // lanes 16..31 never come
  y[threadIdx.x] = v;
}

__global__ void write_one_past(float* y, int n) {
  y[n] = 0.0f;
}

float* device_floats(std::size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  return static_cast<float*>(p);
}

TEST(StandinRules, LaunchLimitsAreTheDevices) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  float* y = device_floats(4096);
  EXPECT_EQ(gpurun_standin::launch("fill", fill, 1, 2048, 0, nullptr, y, 4096),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch error is not sticky";
  EXPECT_EQ(gpurun_standin::launch("fill", fill, dim3(1), dim3(32, 1, 65), 0, nullptr, y, 4096),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(gpurun_standin::launch("fill", fill, 1, 256, 49 * 1024, nullptr, y, 4096),
            cudaErrorInvalidConfiguration);
  (void)cudaGetLastError();
  EXPECT_EQ(gpurun_standin::launch("fill", fill, 16, 256, 0, nullptr, y, 4096), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(y);
}

TEST(StandinRules, AThreadThatSkipsABarrierFaultsTheKernel) {
  fresh_device();
  float* y = device_floats(64);
  ASSERT_EQ(gpurun_standin::launch("early_return_before_barrier", early_return_before_barrier, 1,
                                   64, 0, nullptr, y),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaMemset(y, 0, 4), cudaErrorLaunchFailure) << "the fault is sticky";
}

TEST(StandinRules, AShuffleNotEveryMaskedLaneReachesFaults) {
  fresh_device();
  float* y = device_floats(32);
  ASSERT_EQ(gpurun_standin::launch("half_warp_shuffle", half_warp_shuffle, 1, 32, 0, nullptr, y),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
}

void write_past_an_allocation() {
  fresh_device();
  float* y = device_floats(10);
  ASSERT_EQ(gpurun_standin::launch("write_one_past", write_one_past, 1, 1, 0, nullptr, y, 10),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
}

#if defined(__SANITIZE_ADDRESS__)
// Under ASan the guard tail is poisoned (src/memory.cc), so the write itself stops the process
// where it happens, which is what the sanitized build is for.
TEST(StandinRules, AWritePastAnAllocationIsAnIllegalAddress) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the stand-in runs executor threads
  EXPECT_DEATH(write_past_an_allocation(), "use-after-poison");
}
#else
TEST(StandinRules, AWritePastAnAllocationIsAnIllegalAddress) { write_past_an_allocation(); }
#endif

TEST(StandinRules, CopiesAreCheckedAgainstTheirDirectionAndSize) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  float* d = device_floats(8);
  std::vector<float> h(8, 2.0f);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 8 * sizeof(float), cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 9 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 8 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue) << "host memory is not cudaMalloc's";
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue) << "freed twice";
  (void)cudaGetLastError();
}

TEST(StandinRules, FreshMemoryIsNaNAndEventsWaitForTheirWork) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  float* d = device_floats(1);
  float h = 0;
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(h)) << "uninitialised device memory reads as NaN";
  cudaStream_t s;
  cudaEvent_t e;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  float* big = device_floats(1 << 20);
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(gpurun_standin::launch("fill", fill, 4096, 256, 0, s, big, 1 << 20), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady) << "the event came before its work was done";
  (void)cudaGetLastError();
  EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(big), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST(StandinRules, CaptureRulesHaveTheirErrorCodes) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t s, side;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  float* y = device_floats(256);
  cudaGraph_t g = nullptr;
  // An allocation inside a capture invalidates it.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  // A fork that is never joined.
  cudaEvent_t fork;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  ASSERT_EQ(gpurun_standin::launch("fill", fill, 1, 256, 0, side, y, 256), cudaSuccess);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  // Ending from another thread.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaError_t other = cudaSuccess;
  std::thread([&] { other = cudaStreamEndCapture(s, &g); }).join();
  EXPECT_EQ(other, cudaErrorStreamCaptureWrongThread);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaEventDestroy(fork), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(y), cudaSuccess);
}

TEST(StandinRules, CublasChecksItsArguments) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  float* a = device_floats(64);
  const float one = 1.0f, zero = 0.0f;
  // A is 8x8 but lda 4 is less than the 8 rows: refused before anything runs.
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, a, 4, a, 8, &zero, a, 8),
            CUBLAS_STATUS_INVALID_VALUE);
  float* misaligned = a + 1;
  EXPECT_EQ(cublasSetWorkspace(h, misaligned, 64), CUBLAS_STATUS_INVALID_VALUE);
  // beta == 0: C (fresh memory: NaN) is not read, so the product is finite.
  std::vector<float> ones(64, 1.0f), out(64);
  ASSERT_EQ(cudaMemcpy(a, ones.data(), 64 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  float* c = device_floats(64);
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, a, 8, a, 8, &zero, c, 8),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaMemcpy(out.data(), c, 64 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out[0], 8.0f) << "NaN in C leaked through beta = 0";
  EXPECT_EQ(out[63], 8.0f);
  EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

TEST(StandinRules, CudnnChecksDescriptorsAndWorkspace) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudnnHandle_t h;
  ASSERT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t c;
  cudnnCreateTensorDescriptor(&x);
  cudnnCreateTensorDescriptor(&y);
  cudnnCreateFilterDescriptor(&w);
  cudnnCreateConvolutionDescriptor(&c);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 1, 8, 8),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 1, 3, 3),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            CUDNN_STATUS_SUCCESS);
  // The output of a 3x3 filter on 8x8 is 6x6, not 8x8.
  ASSERT_EQ(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 8, 8),
            CUDNN_STATUS_SUCCESS);
  float* xd = device_floats(2 * 64);
  float* wd = device_floats(36);
  float* yd = device_floats(2 * 4 * 64);
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(cudnnConvolutionForward(h, &one, x, xd, w, wd, c,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                    y, yd),
            CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 6, 6),
            CUDNN_STATUS_SUCCESS);
  // GEMM works through the workspace: none given is refused.
  EXPECT_EQ(cudnnConvolutionForward(h, &one, x, xd, w, wd, c, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                    nullptr, 0, &zero, y, yd),
            CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT);
  EXPECT_EQ(cudnnConvolutionForward(h, &one, x, xd, w, wd, c,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                    y, yd),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudnnDestroyConvolutionDescriptor(c);
  cudnnDestroyFilterDescriptor(w);
  cudnnDestroyTensorDescriptor(y);
  cudnnDestroyTensorDescriptor(x);
  EXPECT_EQ(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
  for (float* p : {xd, wd, yd}) EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(StandinRules, NcclRefusesTwoRanksOnOneGpu) {
  // Two "ranks" in one process, both on device 0: NCCL 2.28 says Duplicate GPU.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t a = nullptr, b = nullptr;
  ncclResult_t ra = ncclSuccess, rb = ncclSuccess;
  std::thread t([&] {
    cudaSetDevice(0);
    rb = ncclCommInitRank(&b, 2, id, 1);
  });
  ra = ncclCommInitRank(&a, 2, id, 0);
  t.join();
  EXPECT_EQ(ra, ncclInvalidUsage);
  EXPECT_EQ(rb, ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(a)).find("Duplicate GPU detected"), std::string::npos);
}

TEST(StandinRules, TheDeviceSaysItIsAStandIn) {
  cudaDeviceProp p;
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_NE(std::string(p.name).find("stand-in"), std::string::npos) << p.name;
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.multiProcessorCount, 132);
}

}  // namespace

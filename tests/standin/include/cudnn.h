// cudnn.h of the gpurun CUDA stand-in (tests/standin/README.md): the cuDNN 9 legacy convolution
// API that gpurun calls (4-d NCHW float tensors and filters, 2-d convolution descriptors,
// forward, backward-data and backward-filter, algorithm find/get), with cuDNN's status codes;
// the convolutions run on the CPU with loops of the stand-in's own.
#pragma once

#include "cuda_runtime.h"

#define CUDNN_MAJOR 9
#define CUDNN_MINOR 19
#define CUDNN_PATCHLEVEL 0
#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

typedef enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_BAD_PARAM_NULL_POINTER = 2002,
  CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT = 2006,
  CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH = 2007,
  CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH = 2008,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
  CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE = 3003,
  CUDNN_STATUS_NOT_SUPPORTED_LAYOUT = 3004,
  CUDNN_STATUS_INTERNAL_ERROR = 4000,
  CUDNN_STATUS_EXECUTION_FAILED = 5000,
} cudnnStatus_t;

typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1, CUDNN_DATA_HALF = 2 } cudnnDataType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 } cudnnTensorFormat_t;
typedef enum {
  CUDNN_DEFAULT_MATH = 0,
  CUDNN_TENSOR_OP_MATH = 1,
  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
  CUDNN_FMA_MATH = 3
} cudnnMathType_t;
typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;

typedef enum {
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0,
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM = 1,
  CUDNN_CONVOLUTION_FWD_ALGO_GEMM = 2,
  CUDNN_CONVOLUTION_FWD_ALGO_DIRECT = 3,
  CUDNN_CONVOLUTION_FWD_ALGO_FFT = 4,
  CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING = 5,
  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD = 6,
  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED = 7,
  CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8
} cudnnConvolutionFwdAlgo_t;
typedef enum {
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 = 0,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT = 2,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 = 3,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7
} cudnnConvolutionBwdFilterAlgo_t;
typedef enum {
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT = 2,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6
} cudnnConvolutionBwdDataAlgo_t;

#define GPURUN_STANDIN_PERF(Name, Algo) \
  typedef struct {                      \
    Algo algo;                          \
    cudnnStatus_t status;               \
    float time;                         \
    size_t memory;                      \
    cudnnDeterminism_t determinism;     \
    cudnnMathType_t mathType;           \
    int reserved[3];                    \
  } Name;
GPURUN_STANDIN_PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t)
GPURUN_STANDIN_PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t)
GPURUN_STANDIN_PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t)
#undef GPURUN_STANDIN_PERF

namespace gpurun_standin {
struct CudnnImpl;
struct TensorDescImpl;
struct FilterDescImpl;
struct ConvDescImpl;
}  // namespace gpurun_standin
typedef gpurun_standin::CudnnImpl* cudnnHandle_t;
typedef gpurun_standin::TensorDescImpl* cudnnTensorDescriptor_t;
typedef gpurun_standin::FilterDescImpl* cudnnFilterDescriptor_t;
typedef gpurun_standin::ConvDescImpl* cudnnConvolutionDescriptor_t;

size_t cudnnGetVersion();
const char* cudnnGetErrorString(cudnnStatus_t status);
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream);

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute_type);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m);

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
    cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t y, int requested, int* returned,
    cudnnConvolutionFwdAlgoPerf_t* results);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t c, cudnnFilterDescriptor_t dw, int requested, int* returned,
    cudnnConvolutionBwdFilterAlgoPerf_t* results);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t dx, int requested, int* returned,
    cudnnConvolutionBwdDataAlgoPerf_t* results);
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t h, cudnnTensorDescriptor_t xd, const void* x, cudnnFilterDescriptor_t wd,
    const void* w, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t yd, void* y,
    int requested, int* returned, cudnnConvolutionFwdAlgoPerf_t* results, void* ws,
    size_t ws_bytes);
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, cudnnTensorDescriptor_t xd, const void* x, cudnnTensorDescriptor_t dyd,
    const void* dy, cudnnConvolutionDescriptor_t c, cudnnFilterDescriptor_t dwd, void* dw,
    int requested, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results, void* ws,
    size_t ws_bytes);
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, cudnnFilterDescriptor_t wd, const void* w, cudnnTensorDescriptor_t dyd,
    const void* dy, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t dxd, void* dx,
    int requested, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results, void* ws,
    size_t ws_bytes);

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha,
                                      cudnnTensorDescriptor_t xd, const void* x,
                                      cudnnFilterDescriptor_t wd, const void* w,
                                      cudnnConvolutionDescriptor_t c,
                                      cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_bytes,
                                      const void* beta, cudnnTensorDescriptor_t yd, void* y);
cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t h, const void* alpha, cudnnTensorDescriptor_t xd, const void* x,
    cudnnTensorDescriptor_t dyd, const void* dy, cudnnConvolutionDescriptor_t c,
    cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t ws_bytes, const void* beta,
    cudnnFilterDescriptor_t dwd, void* dw);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha,
                                           cudnnFilterDescriptor_t wd, const void* w,
                                           cudnnTensorDescriptor_t dyd, const void* dy,
                                           cudnnConvolutionDescriptor_t c,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* ws,
                                           size_t ws_bytes, const void* beta,
                                           cudnnTensorDescriptor_t dxd, void* dx);

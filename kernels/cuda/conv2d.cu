// conv2d.cu: cuda:: convolution forward, backward-filter and backward-data with cuDNN's
// convolution API (conv2d.h). Per shape (and device, math precision and algorithm choice) one
// Plan holds the cuDNN descriptors and the algorithms, chosen once: conv2d_workspace_floats()
// benchmarks them with cudnnFind*AlgorithmEx under ConvAlgoChoice::kBenchmark (call it at setup,
// outside any graph capture); an op called for a shape nobody planned, and every shape under
// kHeuristic, picks by cudnnGet*_v7 heuristics, which run on the host only and so are safe while
// a CUDA Graph is being captured. Deterministic algorithms are preferred (the backward-filter
// algorithms 0 and 3 add with atomics), so a run repeats bit for bit within a process, and across
// processes under kHeuristic.
// FP32 uses CUDNN_FMA_MATH: cuDNN's default math lets FP32 convolutions run as TF32 on Ampere+.
// Tested against the CPU twin by tests/kernels/cuda (ctest -L gpu).
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "gpurun/cuda_support/check.cuh"
#include "gpurun/cuda_support/owners.h"
#include "context.cuh"
#include "gpurun/kernels/conv2d.h"

namespace gpurun::kernels::cuda {
namespace {

// Move-free RAII holders for the three descriptor kinds (a Plan owns them and never moves).
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { GPURUN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { GPURUN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { GPURUN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

enum class Choice { kHeuristic, kBenchmark };

struct Plan {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc fwd_conv, bwd_filter_conv, bwd_data_conv;  // each carries its algorithm's math type
  cudnnConvolutionFwdAlgo_t fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  cudnnConvolutionBwdDataAlgo_t bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  std::size_t fwd_bytes = 0, bwd_filter_bytes = 0, bwd_data_bytes = 0;
  bool benchmarked = false;
};

using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int>;

std::atomic<int> g_algo_choice{int(ConvAlgoChoice::kBenchmark)};

Key key_of(const Conv2dDesc& d, int dev, MathPrecision p) {
  return Key{dev,   d.batch, d.in_c,   d.in_h, d.in_w, d.out_c,
             d.k_h, d.k_w,   d.stride, d.pad,  int(p), g_algo_choice.load()};
}

// Cap on what benchmarking may try: FFT algorithms can ask for hundreds of MB for a 1 MB problem.
constexpr std::size_t kMaxWorkspaceBytes = std::size_t(64) << 20;

template <typename Perf>
const Perf* pick(const Perf* r, int n, std::size_t limit) {
  for (int i = 0; i < n; ++i)  // results come fastest first
    if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].determinism == CUDNN_DETERMINISTIC &&
        r[i].memory <= limit)
      return &r[i];
  for (int i = 0; i < n; ++i)
    if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].memory <= limit) return &r[i];
  return nullptr;
}

std::string shape_name(const Conv2dDesc& d) {
  return "conv2d " + std::to_string(d.batch) + "x" + std::to_string(d.in_c) + "x" +
         std::to_string(d.in_h) + "x" + std::to_string(d.in_w) + " -> " + std::to_string(d.out_c) +
         " (" + std::to_string(d.k_h) + "x" + std::to_string(d.k_w) + ")";
}

void set_math(cudnnConvolutionDescriptor_t c, MathPrecision p, cudnnMathType_t chosen) {
  GPURUN_CUDNN_CHECK(
      cudnnSetConvolutionMathType(c, p == MathPrecision::kTf32 ? chosen : CUDNN_FMA_MATH));
}

void describe(Plan& pl, const Conv2dDesc& d, MathPrecision p) {
  GPURUN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl.x.d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                d.batch, d.in_c, d.in_h, d.in_w));
  GPURUN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl.y.d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                d.batch, d.out_c, d.out_h(), d.out_w()));
  GPURUN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(pl.w.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                d.out_c, d.in_c, d.k_h, d.k_w));
  for (cudnnConvolutionDescriptor_t c : {pl.fwd_conv.d, pl.bwd_filter_conv.d, pl.bwd_data_conv.d}) {
    GPURUN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c, d.pad, d.pad, d.stride, d.stride, 1, 1,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    set_math(c, p, CUDNN_TENSOR_OP_MATH);
  }
}

void choose(Plan& pl, const Conv2dDesc& d, MathPrecision p, Choice how, std::size_t limit) {
  cudnnHandle_t h = detail::cudnn_on(Stream{});
  constexpr int kMax = 16;
  int n = 0;
  if (how == Choice::kBenchmark) {
    // Find*Ex runs every algorithm on real buffers, synchronously; their contents do not matter
    // (zeroed on the legacy stream, which the handle's default stream follows).
    using cuda_support::DeviceBuffer;
    const DeviceBuffer<float> x(d.x_floats(), nullptr), w(d.w_floats(), nullptr),
        y(d.y_floats(), nullptr), dx(d.x_floats(), nullptr), dw(d.w_floats(), nullptr);
    const DeviceBuffer<unsigned char> ws(limit, nullptr);
    cudnnConvolutionFwdAlgoPerf_t f[kMax];
    GPURUN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, pl.x.d, x.get(), pl.w.d, w.get(),
                                                              pl.fwd_conv.d, pl.y.d, y.get(), kMax,
                                                              &n, f, ws.get(), limit));
    const auto* bf = pick(f, n, limit);
    cudnnConvolutionBwdFilterAlgoPerf_t g[kMax];
    GPURUN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, pl.x.d, x.get(), pl.y.d, y.get(), pl.bwd_filter_conv.d, pl.w.d, dw.get(), kMax, &n, g,
        ws.get(), limit));
    const auto* bg = pick(g, n, limit);
    cudnnConvolutionBwdDataAlgoPerf_t b[kMax];
    GPURUN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, pl.w.d, w.get(), pl.y.d, y.get(), pl.bwd_data_conv.d, pl.x.d, dx.get(), kMax, &n, b,
        ws.get(), limit));
    const auto* bb = pick(b, n, limit);
    if (!bf || !bg || !bb)
      throw std::runtime_error(shape_name(d) + ": cuDNN found no working algorithm");
    pl.fwd = bf->algo, pl.fwd_bytes = bf->memory, set_math(pl.fwd_conv.d, p, bf->mathType);
    pl.bwd_filter = bg->algo, pl.bwd_filter_bytes = bg->memory;
    set_math(pl.bwd_filter_conv.d, p, bg->mathType);
    pl.bwd_data = bb->algo, pl.bwd_data_bytes = bb->memory;
    set_math(pl.bwd_data_conv.d, p, bb->mathType);
    pl.benchmarked = true;
    return;
  }
  cudnnConvolutionFwdAlgoPerf_t f[kMax];
  GPURUN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, pl.x.d, pl.w.d, pl.fwd_conv.d,
                                                            pl.y.d, kMax, &n, f));
  const auto* bf = pick(f, n, limit);
  cudnnConvolutionBwdFilterAlgoPerf_t g[kMax];
  GPURUN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, pl.x.d, pl.y.d, pl.bwd_filter_conv.d, pl.w.d, kMax, &n, g));
  const auto* bg = pick(g, n, limit);
  cudnnConvolutionBwdDataAlgoPerf_t b[kMax];
  GPURUN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, pl.w.d, pl.y.d, pl.bwd_data_conv.d, pl.x.d, kMax, &n, b));
  const auto* bb = pick(b, n, limit);
  if (!bf || !bg || !bb)
    throw std::runtime_error(shape_name(d) + ": cuDNN heuristics offer no algorithm within a " +
                             std::to_string(limit) + "-byte workspace");
  pl.fwd = bf->algo, pl.fwd_bytes = bf->memory, set_math(pl.fwd_conv.d, p, bf->mathType);
  pl.bwd_filter = bg->algo, pl.bwd_filter_bytes = bg->memory;
  set_math(pl.bwd_filter_conv.d, p, bg->mathType);
  pl.bwd_data = bb->algo, pl.bwd_data_bytes = bb->memory;
  set_math(pl.bwd_data_conv.d, p, bb->mathType);
}

std::mutex g_mu;
std::map<Key, std::unique_ptr<Plan>> g_plans;

// The plan for d: benchmarked when `how` asks for it, else whatever exists or the heuristics'
// choice within `limit` bytes of workspace.
Plan& plan(const Conv2dDesc& d, Choice how, std::size_t limit) {
  validate(d);
  int dev = 0;
  GPURUN_CUDA_CHECK(cudaGetDevice(&dev));
  const MathPrecision p = math_precision();
  std::lock_guard<std::mutex> lock(g_mu);
  auto& slot = g_plans[key_of(d, dev, p)];
  if (slot && (how == Choice::kHeuristic || slot->benchmarked)) return *slot;
  auto pl = std::make_unique<Plan>();
  describe(*pl, d, p);
  choose(*pl, d, p, how, limit);
  slot = std::move(pl);
  return *slot;
}

void check_ws(const Conv2dDesc& d, const char* op, std::size_t need, const Workspace& ws) {
  if (need > ws.floats * sizeof(float) || (need > 0 && ws.data == nullptr)) {
    throw std::invalid_argument(shape_name(d) + " " + op + ": workspace of " +
                                std::to_string(ws.floats) + " floats, the algorithm needs " +
                                std::to_string((need + 3) / 4) +
                                " (size it with cuda::conv2d_workspace_floats)");
  }
}

}  // namespace

void set_conv_algo_choice(ConvAlgoChoice c) {
  g_algo_choice.store(int(c));
}
ConvAlgoChoice conv_algo_choice() {
  return ConvAlgoChoice(g_algo_choice.load());
}

std::size_t conv2d_workspace_floats(const Conv2dDesc& d) {
  const Choice how =
      conv_algo_choice() == ConvAlgoChoice::kBenchmark ? Choice::kBenchmark : Choice::kHeuristic;
  const Plan& pl = plan(d, how, kMaxWorkspaceBytes);
  const std::size_t bytes = std::max({pl.fwd_bytes, pl.bwd_filter_bytes, pl.bwd_data_bytes});
  return std::max((bytes + sizeof(float) - 1) / sizeof(float), conv2d_direct_workspace_floats(d));
}

void conv2d_forward(const Conv2dDesc& d, const float* x, const float* w, float* y, Workspace ws,
                    Stream s) {
  const Plan& pl = plan(d, Choice::kHeuristic, ws.floats * sizeof(float));
  check_ws(d, "forward", pl.fwd_bytes, ws);
  const float one = 1.0f, zero = 0.0f;
  GPURUN_CUDNN_CHECK(cudnnConvolutionForward(detail::cudnn_on(s), &one, pl.x.d, x, pl.w.d, w,
                                             pl.fwd_conv.d, pl.fwd, ws.data, pl.fwd_bytes, &zero,
                                             pl.y.d, y));
}

void conv2d_backward_weights(const Conv2dDesc& d, const float* x, const float* dy, float* dw,
                             Workspace ws, Accumulate acc, Stream s) {
  const Plan& pl = plan(d, Choice::kHeuristic, ws.floats * sizeof(float));
  check_ws(d, "backward_weights", pl.bwd_filter_bytes, ws);
  const float one = 1.0f, beta = acc == Accumulate::kAdd ? 1.0f : 0.0f;
  GPURUN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      detail::cudnn_on(s), &one, pl.x.d, x, pl.y.d, dy, pl.bwd_filter_conv.d, pl.bwd_filter,
      ws.data, pl.bwd_filter_bytes, &beta, pl.w.d, dw));
}

void conv2d_backward_data(const Conv2dDesc& d, const float* w, const float* dy, float* dx,
                          Workspace ws, Stream s) {
  const Plan& pl = plan(d, Choice::kHeuristic, ws.floats * sizeof(float));
  check_ws(d, "backward_data", pl.bwd_data_bytes, ws);
  const float one = 1.0f, zero = 0.0f;
  GPURUN_CUDNN_CHECK(cudnnConvolutionBackwardData(detail::cudnn_on(s), &one, pl.w.d, w, pl.y.d, dy,
                                                  pl.bwd_data_conv.d, pl.bwd_data, ws.data,
                                                  pl.bwd_data_bytes, &zero, pl.x.d, dx));
}

}  // namespace gpurun::kernels::cuda

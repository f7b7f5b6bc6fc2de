// cudnn.cc (gpurun CUDA stand-in): cuDNN's legacy convolution API on the CPU.
//  - Descriptors are checked as cuDNN does: NCHW float only, the input's channels are the
//    filter's, the output tensor has exactly the convolution's output shape
//    (CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH), the workspace covers the algorithm's need
//    (CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT).
//  - Algorithms the stand-in offers, each computed its own way: forward IMPLICIT_GEMM (direct
//    loops, no workspace) and GEMM (im2col into the workspace, then a product); backward-filter
//    ALGO_1 (deterministic, im2col in the workspace) and ALGO_0 / ALGO_3 (non-deterministic: the
//    images are summed in a new random order every call, as atomics would); backward-data ALGO_1
//    (deterministic: a product into the workspace, then col2im) and ALGO_0 (a scatter over the
//    output channels in a new random order every call). Times in the perf results are a model
//    (FLOP over a made-up rate), never a measurement, so choices repeat run to run.
//  - The output is not read when beta is zero; the workspace is scribbled over after each call.
//  - Math: CUDNN_FMA_MATH is FP32; CUDNN_DEFAULT_MATH and the tensor-op modes round the inputs to
//    TF32 (what an H100 does for FP32 data under them).
#include "cudnn.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <vector>

#include "core.h"
#include "tf32.h"

namespace gpurun_standin {

struct CudnnImpl {
  Device* device = nullptr;
  cudaStream_t stream = nullptr;
  bool alive = true;
};
struct TensorDescImpl {
  bool set = false;
  int n = 0, c = 0, h = 0, w = 0;
};
struct FilterDescImpl {
  bool set = false;
  int k = 0, c = 0, h = 0, w = 0;
};
struct ConvDescImpl {
  bool set = false;
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
  bool flip = false;  // CUDNN_CONVOLUTION (true) or CUDNN_CROSS_CORRELATION
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

struct Shape {
  int n, c, h, w, k, r, s, oh, ow, ph, pw, u, v, dh, dw;
  bool flip, tf32;
  std::size_t x_floats() const { return std::size_t(n) * c * h * w; }
  std::size_t w_floats() const { return std::size_t(k) * c * r * s; }
  std::size_t y_floats() const { return std::size_t(n) * k * oh * ow; }
  std::size_t col_floats() const { return std::size_t(c) * r * s * oh * ow; }  // one image
  double flop() const { return 2.0 * double(n) * k * oh * ow * c * r * s; }
};

cudnnStatus_t bad(cudnnStatus_t st, const std::string& what) {
  say(what + " (" + cudnnGetErrorString(st) + ")");
  return st;
}

// The shape of a convolution from its descriptors; y (or dy, dx) must be the output / input.
cudnnStatus_t shape_of(const char* call, const TensorDescImpl* x, const FilterDescImpl* w,
                       const ConvDescImpl* cv, const TensorDescImpl* y, Shape* s) {
  if (!x || !w || !cv || !y)
    return bad(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(call) + ": a NULL descriptor");
  if (!x->set || !w->set || !cv->set || !y->set)
    return bad(CUDNN_STATUS_BAD_PARAM, std::string(call) + ": a descriptor was never set");
  if (x->c != w->c)
    return bad(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
               std::string(call) + ": the input has " + std::to_string(x->c) +
                   " channels, the filter " + std::to_string(w->c));
  const int oh = (x->h + 2 * cv->pad_h - cv->dil_h * (w->h - 1) - 1) / cv->u + 1;
  const int ow = (x->w + 2 * cv->pad_w - cv->dil_w * (w->w - 1) - 1) / cv->v + 1;
  if (oh <= 0 || ow <= 0)
    return bad(CUDNN_STATUS_BAD_PARAM,
               std::string(call) + ": the filter is larger than the padded input");
  if (y->n != x->n || y->c != w->k || y->h != oh || y->w != ow)
    return bad(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
               std::string(call) + ": the output tensor is " + std::to_string(y->n) + "x" +
                   std::to_string(y->c) + "x" + std::to_string(y->h) + "x" + std::to_string(y->w) +
                   ", the convolution's output " + std::to_string(x->n) + "x" +
                   std::to_string(w->k) + "x" + std::to_string(oh) + "x" + std::to_string(ow));
  *s = Shape{x->n,
             x->c,
             x->h,
             x->w,
             w->k,
             w->h,
             w->w,
             oh,
             ow,
             cv->pad_h,
             cv->pad_w,
             cv->u,
             cv->v,
             cv->dil_h,
             cv->dil_w,
             cv->flip,
             cv->math != CUDNN_FMA_MATH};
  return CUDNN_STATUS_SUCCESS;
}

// Input row/column of output (p, q) under filter tap (i, j); outside the input: -1.
inline int in_row(const Shape& s, int p, int i) {
  const int ii = s.flip ? s.r - 1 - i : i;
  const int y = p * s.u - s.ph + ii * s.dh;
  return y >= 0 && y < s.h ? y : -1;
}
inline int in_col(const Shape& s, int q, int j) {
  const int jj = s.flip ? s.s - 1 - j : j;
  const int x = q * s.v - s.pw + jj * s.dw;
  return x >= 0 && x < s.w ? x : -1;
}

// Reused per executor thread: a convolution allocates nothing in the steady state (a fresh
// multi-MB vector per call costs page faults, which dominated the stand-in's step time).
float* scratch(int slot, std::size_t n) {
  static thread_local std::vector<float> bufs[3];
  if (bufs[slot].size() < n) bufs[slot].resize(n);
  return bufs[slot].data();
}

// The input as the math type reads it: itself for FP32, a TF32-rounded copy otherwise.
const float* as_read(int slot, const float* p, std::size_t n, bool tf32) {
  if (!tf32) return p;
  float* c = scratch(slot, n);
  for (std::size_t i = 0; i < n; ++i) c[i] = to_tf32(p[i]);
  return c;
}

// Where a result goes before out = alpha * r + beta * out: straight into out when that is all
// (alpha 1, beta 0: out is not read), else into scratch and blended.
struct Result {
  float* out;
  std::size_t n;
  float alpha, beta;
  float* r;
  Result(float* o, std::size_t count, float a, float b)
      : out(o), n(count), alpha(a), beta(b), r(a == 1.0f && b == 0.0f ? o : scratch(2, count)) {
    std::fill(r, r + n, 0.0f);
  }
  void finish() const {
    if (r == out) return;
    for (std::size_t i = 0; i < n; ++i)
      out[i] = beta == 0.0f ? alpha * r[i] : alpha * r[i] + beta * out[i];
  }
};

// One image's im2col: rows (c, i, j), columns (p, q).
void im2col(const Shape& s, const float* x, float* col) {
  for (int c = 0; c < s.c; ++c)
    for (int i = 0; i < s.r; ++i)
      for (int j = 0; j < s.s; ++j) {
        float* row = col + ((std::size_t(c) * s.r + i) * s.s + j) * s.oh * s.ow;
        for (int p = 0; p < s.oh; ++p)
          for (int q = 0; q < s.ow; ++q) {
            const int y = in_row(s, p, i), xx = in_col(s, q, j);
            row[p * s.ow + q] = y < 0 || xx < 0 ? 0.0f : x[(std::size_t(c) * s.h + y) * s.w + xx];
          }
      }
}

void fwd_direct(const Shape& s, const float* x, const float* w, float* y) {
  for (int n = 0; n < s.n; ++n)
    for (int k = 0; k < s.k; ++k)
      for (int p = 0; p < s.oh; ++p)
        for (int q = 0; q < s.ow; ++q) {
          float acc = 0.0f;
          for (int c = 0; c < s.c; ++c)
            for (int i = 0; i < s.r; ++i) {
              const int yy = in_row(s, p, i);
              if (yy < 0) continue;
              for (int j = 0; j < s.s; ++j) {
                const int xx = in_col(s, q, j);
                if (xx < 0) continue;
                acc += x[((std::size_t(n) * s.c + c) * s.h + yy) * s.w + xx] *
                       w[((std::size_t(k) * s.c + c) * s.r + i) * s.s + j];
              }
            }
          y[((std::size_t(n) * s.k + k) * s.oh + p) * s.ow + q] = acc;
        }
}

void fwd_gemm(const Shape& s, const float* x, const float* w, float* ws, float* y) {
  const int crs = s.c * s.r * s.s, pq = s.oh * s.ow;
  for (int n = 0; n < s.n; ++n) {
    im2col(s, x + std::size_t(n) * s.c * s.h * s.w, ws);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.k, pq, crs, 1.0f, w, crs, ws, pq, 0.0f,
                y + std::size_t(n) * s.k * pq, pq);
  }
}

// dW (zeroed) over the images in `order`, directly, or through im2col in the workspace.
void bwd_filter(const Shape& s, const float* x, const float* dy, const std::vector<int>& order,
                float* ws, float* dw) {
  const int crs = s.c * s.r * s.s, pq = s.oh * s.ow;
  for (int n : order) {
    const float* xn = x + std::size_t(n) * s.c * s.h * s.w;
    const float* dyn = dy + std::size_t(n) * s.k * pq;
    if (ws != nullptr) {
      im2col(s, xn, ws);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.k, crs, pq, 1.0f, dyn, pq, ws, pq,
                  1.0f, dw, crs);
      continue;
    }
    for (int k = 0; k < s.k; ++k)
      for (int c = 0; c < s.c; ++c)
        for (int i = 0; i < s.r; ++i)
          for (int j = 0; j < s.s; ++j) {
            float acc = 0.0f;
            for (int p = 0; p < s.oh; ++p) {
              const int yy = in_row(s, p, i);
              if (yy < 0) continue;
              for (int q = 0; q < s.ow; ++q) {
                const int xx = in_col(s, q, j);
                if (xx >= 0)
                  acc += dyn[(std::size_t(k) * s.oh + p) * s.ow + q] *
                         xn[(std::size_t(c) * s.h + yy) * s.w + xx];
              }
            }
            dw[((std::size_t(k) * s.c + c) * s.r + i) * s.s + j] += acc;
          }
  }
}

// dX (zeroed) through the workspace: per image, the columns' gradient W^T x dY, then col2im
// adds each column back to the pixels it came from (a fixed order: deterministic).
void bwd_data_gemm(const Shape& s, const float* w, const float* dy, float* ws, float* dx) {
  const int crs = s.c * s.r * s.s, pq = s.oh * s.ow;
  for (int n = 0; n < s.n; ++n) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs, pq, s.k, 1.0f, w, crs,
                dy + std::size_t(n) * s.k * pq, pq, 0.0f, ws, pq);
    float* dxn = dx + std::size_t(n) * s.c * s.h * s.w;
    for (int c = 0; c < s.c; ++c)
      for (int i = 0; i < s.r; ++i)
        for (int j = 0; j < s.s; ++j) {
          const float* row = ws + ((std::size_t(c) * s.r + i) * s.s + j) * pq;
          for (int p = 0; p < s.oh; ++p) {
            const int y = in_row(s, p, i);
            if (y < 0) continue;
            for (int q = 0; q < s.ow; ++q) {
              const int xx = in_col(s, q, j);
              if (xx >= 0) dxn[(std::size_t(c) * s.h + y) * s.w + xx] += row[p * s.ow + q];
            }
          }
        }
  }
}

// dX (zeroed) by scattering each output's gradient through the filter, channels in `order`.
void bwd_data(const Shape& s, const float* w, const float* dy, const std::vector<int>& order,
              float* dx) {
  for (int n = 0; n < s.n; ++n)
    for (int k : order)
      for (int p = 0; p < s.oh; ++p)
        for (int q = 0; q < s.ow; ++q) {
          const float g = dy[((std::size_t(n) * s.k + k) * s.oh + p) * s.ow + q];
          for (int c = 0; c < s.c; ++c)
            for (int i = 0; i < s.r; ++i) {
              const int yy = in_row(s, p, i);
              if (yy < 0) continue;
              for (int j = 0; j < s.s; ++j) {
                const int xx = in_col(s, q, j);
                if (xx >= 0)
                  dx[((std::size_t(n) * s.c + c) * s.h + yy) * s.w + xx] +=
                      g * w[((std::size_t(k) * s.c + c) * s.r + i) * s.s + j];
              }
            }
        }
}

std::vector<int> iota(int n, bool shuffled) {
  std::vector<int> v(std::size_t(std::max(n, 0)));
  for (int i = 0; i < n; ++i) v[std::size_t(i)] = i;
  if (shuffled) {
    static thread_local std::mt19937 rng{std::random_device{}()};
    std::shuffle(v.begin(), v.end(), rng);
  }
  return v;
}

// ---- the algorithms the stand-in offers, per direction --------------------------------------
enum class Dir { kFwd, kBwdFilter, kBwdData };
struct Algo {
  int id;
  bool deterministic;
  bool uses_ws;  // im2col of one image in the workspace
  double speed;  // model: relative FLOP rate (higher is faster)
};
const std::vector<Algo>& algos(Dir d) {
  static const std::vector<Algo> fwd{{CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true, true, 1.3},
                                     {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true, false, 1.0}};
  static const std::vector<Algo> bf{{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false, false, 1.4},
                                    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, true, 1.2},
                                    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, false, false, 1.1}};
  static const std::vector<Algo> bd{{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false, false, 1.3},
                                    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, true, 1.0}};
  return d == Dir::kFwd ? fwd : d == Dir::kBwdFilter ? bf : bd;
}
const Algo* find_algo(Dir d, int id) {
  for (const Algo& a : algos(d))
    if (a.id == id) return &a;
  return nullptr;
}
std::size_t ws_need(const Algo& a, const Shape& s) {
  return a.uses_ws ? s.col_floats() * sizeof(float) : 0;
}

template <typename Perf, typename Id>
void fill_perf(Dir d, const Shape& s, cudnnMathType_t math, int requested, int* returned, Perf* out,
               std::size_t ws_limit) {
  std::vector<Algo> list = algos(d);
  std::stable_sort(list.begin(), list.end(),
                   [](const Algo& a, const Algo& b) { return a.speed > b.speed; });
  int n = 0;
  for (const Algo& a : list) {
    if (n >= requested) break;
    Perf p{};
    p.algo = Id(a.id);
    p.memory = ws_need(a, s);
    p.status = p.memory <= ws_limit ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    p.time = float(s.flop() / (a.speed * 1e9));  // a model, in "ms" at a made-up rate
    p.determinism = a.deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    p.mathType = math;
    out[n++] = p;
  }
  *returned = n;
}

// Runs one convolution call on the handle's stream (or captures it). `compute` gets the
// workspace and writes the output itself.
cudnnStatus_t run(CudnnImpl* h, const char* call, const Algo& a, const Shape& s, void* ws,
                  std::size_t ws_bytes, std::vector<std::pair<const void*, std::size_t>> reads,
                  std::pair<const void*, std::size_t> write, std::function<void(float*)> compute) {
  const std::size_t need = ws_need(a, s);
  if (need > ws_bytes)
    return bad(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT,
               std::string(call) + ": the algorithm needs " + std::to_string(need) +
                   " bytes of workspace, " + std::to_string(ws_bytes) + " given");
  if (need > 0 && ws == nullptr)
    return bad(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(call) + ": workspace is NULL");
  Device& d = *h->device;
  StreamImpl* st = resolve(h->stream, d);
  if (legacy_use(st, call) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  reads.push_back({ws, ws_bytes});
  Work w;
  w.what = call;
  const std::string name(call);
  w.run = [&d, name, reads, write, ws, ws_bytes, need, compute]() {
    std::string why;
    for (const auto& [p, bytes] : reads)
      if (bytes > 0 && !device_range(p, bytes, d.ordinal, &why))
        throw std::runtime_error(name + " reads out of bounds: " + why);
    if (!device_range(write.first, write.second, d.ordinal, &why))
      throw std::runtime_error(name + " writes out of bounds: " + why);
    compute(static_cast<float*>(ws));
    // Scribbled: what the algorithm may use (need), and a prefix of the rest.
    if (ws != nullptr)
      std::memset(ws, kFillByte, std::min(ws_bytes, need + (std::size_t(64) << 10)));
  };
  return submit(st, std::move(w)) == cudaSuccess ? CUDNN_STATUS_SUCCESS
                                                 : CUDNN_STATUS_EXECUTION_FAILED;
}

bool handle_ok(CudnnImpl* h) {
  return h != nullptr && h->alive;
}

float scalar(const void* p) {
  return *static_cast<const float*>(p);
}

}  // namespace
}  // namespace gpurun_standin

using namespace gpurun_standin;

size_t cudnnGetVersion() {
  return CUDNN_VERSION;
}

const char* cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER:
      return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT:
      return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH:
      return "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH:
      return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE:
      return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT:
      return "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT";
    case CUDNN_STATUS_INTERNAL_ERROR:
      return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  if (h == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Device* d = current_device();
  if (d == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  if (unsafe_call("cudnnCreate (it allocates device memory)") != cudaSuccess)
    return CUDNN_STATUS_INTERNAL_ERROR;
  *h = new CudnnImpl{d, nullptr, true};
  hold_for_process_life(*h);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  if (!handle_ok(h)) return CUDNN_STATUS_BAD_PARAM;
  h->alive = false;  // kept: work enqueued with it may still run
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  if (!handle_ok(h)) return CUDNN_STATUS_BAD_PARAM;
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}

#define GPURUN_STANDIN_DESC(Create, Destroy, Type, Impl)          \
  cudnnStatus_t Create(Type* d) {                                 \
    if (d == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER; \
    *d = new Impl;                                                \
    return CUDNN_STATUS_SUCCESS;                                  \
  }                                                               \
  cudnnStatus_t Destroy(Type d) {                                 \
    delete d;                                                     \
    return CUDNN_STATUS_SUCCESS;                                  \
  }
GPURUN_STANDIN_DESC(cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor,
                    cudnnTensorDescriptor_t, TensorDescImpl)
GPURUN_STANDIN_DESC(cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor,
                    cudnnFilterDescriptor_t, FilterDescImpl)
GPURUN_STANDIN_DESC(cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor,
                    cudnnConvolutionDescriptor_t, ConvDescImpl)
#undef GPURUN_STANDIN_DESC

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f,
                                         cudnnDataType_t t, int n, int c, int h, int w) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: a dimension <= 0");
  if (t != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (f != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED_LAYOUT;
  *d = TensorDescImpl{true, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t,
                                         cudnnTensorFormat_t f, int k, int c, int h, int w) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0)
    return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilter4dDescriptor: a dimension <= 0");
  if (t != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (f != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED_LAYOUT;
  *d = FilterDescImpl{true, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u,
                                              int v, int dh, int dw, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t t) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (ph < 0 || pw < 0 || u <= 0 || v <= 0 || dh <= 0 || dw <= 0)
    return bad(CUDNN_STATUS_BAD_PARAM,
               "cudnnSetConvolution2dDescriptor: pad < 0 or stride/dilation <= 0");
  if (t != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_BAD_PARAM;
  const cudnnMathType_t math = d->math;
  *d = ConvDescImpl{true, ph, pw, u, v, dh, dw, mode == CUDNN_CONVOLUTION, math};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (m < CUDNN_DEFAULT_MATH || m > CUDNN_FMA_MATH) return CUDNN_STATUS_BAD_PARAM;
  d->math = m;
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithm choice ---------------------------------------------------------------------
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t w,
                                                     cudnnConvolutionDescriptor_t c,
                                                     cudnnTensorDescriptor_t y, int req, int* ret,
                                                     cudnnConvolutionFwdAlgoPerf_t* out) {
  Shape s;
  if (!handle_ok(h) || !ret || !out || req < 1) return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t e = shape_of("cudnnGetConvolutionForwardAlgorithm_v7", x, w, c, y, &s))
    return e;
  fill_perf<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(Dir::kFwd, s, c->math, req,
                                                                      ret, out, SIZE_MAX);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t c, cudnnFilterDescriptor_t dw, int req, int* ret,
    cudnnConvolutionBwdFilterAlgoPerf_t* out) {
  Shape s;
  if (!handle_ok(h) || !ret || !out || req < 1) return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t e = shape_of("cudnnGetConvolutionBackwardFilterAlgorithm_v7", x, dw, c, dy, &s))
    return e;
  fill_perf<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Dir::kBwdFilter, s, c->math, req, ret, out, SIZE_MAX);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t dx, int req, int* ret,
    cudnnConvolutionBwdDataAlgoPerf_t* out) {
  Shape s;
  if (!handle_ok(h) || !ret || !out || req < 1) return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t e = shape_of("cudnnGetConvolutionBackwardDataAlgorithm_v7", dx, w, c, dy, &s))
    return e;
  fill_perf<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Dir::kBwdData, s, c->math, req, ret, out, SIZE_MAX);
  return CUDNN_STATUS_SUCCESS;
}

// Find*Ex: every algorithm runs once on the caller's buffers, synchronously (so not in a
// capture), then the results come as Get*_v7's, with those needing more workspace than given
// marked CUDNN_STATUS_NOT_SUPPORTED.
template <typename Perf, typename Id, typename Exec>
cudnnStatus_t find_algos(const char* fn, Dir dir, const Shape& s, cudnnHandle_t h,
                         cudnnConvolutionDescriptor_t c, std::size_t ws_bytes, int req, int* ret,
                         Perf* out, Exec exec) {
  if (unsafe_call(fn) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  for (const Algo& a : algos(dir)) {
    if (ws_need(a, s) > ws_bytes) continue;
    if (cudnnStatus_t e = exec(Id(a.id))) return e;
  }
  if (cudaStreamSynchronize(h->stream) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  fill_perf<Perf, Id>(dir, s, c->math, req, ret, out, ws_bytes);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, cudnnTensorDescriptor_t xd,
                                                     const void* x, cudnnFilterDescriptor_t wd,
                                                     const void* w, cudnnConvolutionDescriptor_t c,
                                                     cudnnTensorDescriptor_t yd, void* y, int req,
                                                     int* ret, cudnnConvolutionFwdAlgoPerf_t* out,
                                                     void* ws, size_t ws_bytes) {
  const char* fn = "cudnnFindConvolutionForwardAlgorithmEx";
  Shape s;
  const float one = 1.0f, zero = 0.0f;
  if (!handle_ok(h) || !ret || !out || req < 1) return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t e = shape_of(fn, xd, wd, c, yd, &s)) return e;
  return find_algos<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      fn, Dir::kFwd, s, h, c, ws_bytes, req, ret, out, [&](cudnnConvolutionFwdAlgo_t a) {
        return cudnnConvolutionForward(h, &one, xd, x, wd, w, c, a, ws, ws_bytes, &zero, yd, y);
      });
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, cudnnTensorDescriptor_t xd, const void* x, cudnnTensorDescriptor_t dyd,
    const void* dy, cudnnConvolutionDescriptor_t c, cudnnFilterDescriptor_t dwd, void* dw, int req,
    int* ret, cudnnConvolutionBwdFilterAlgoPerf_t* out, void* ws, size_t ws_bytes) {
  const char* fn = "cudnnFindConvolutionBackwardFilterAlgorithmEx";
  Shape s;
  const float one = 1.0f, zero = 0.0f;
  if (!handle_ok(h) || !ret || !out || req < 1) return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t e = shape_of(fn, xd, dwd, c, dyd, &s)) return e;
  return find_algos<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      fn, Dir::kBwdFilter, s, h, c, ws_bytes, req, ret, out,
      [&](cudnnConvolutionBwdFilterAlgo_t a) {
        return cudnnConvolutionBackwardFilter(h, &one, xd, x, dyd, dy, c, a, ws, ws_bytes, &zero,
                                              dwd, dw);
      });
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, cudnnFilterDescriptor_t wd, const void* w, cudnnTensorDescriptor_t dyd,
    const void* dy, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t dxd, void* dx, int req,
    int* ret, cudnnConvolutionBwdDataAlgoPerf_t* out, void* ws, size_t ws_bytes) {
  const char* fn = "cudnnFindConvolutionBackwardDataAlgorithmEx";
  Shape s;
  const float one = 1.0f, zero = 0.0f;
  if (!handle_ok(h) || !ret || !out || req < 1) return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t e = shape_of(fn, dxd, wd, c, dyd, &s)) return e;
  return find_algos<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      fn, Dir::kBwdData, s, h, c, ws_bytes, req, ret, out, [&](cudnnConvolutionBwdDataAlgo_t a) {
        return cudnnConvolutionBackwardData(h, &one, wd, w, dyd, dy, c, a, ws, ws_bytes, &zero, dxd,
                                            dx);
      });
}

// ---- the convolutions ---------------------------------------------------------------------
namespace {

// What the three directions share: the checks, the algorithm, the math type's view of the two
// inputs, alpha and beta, and the run on the handle's stream. `compute` writes the result (zeroed
// scratch or the output itself) from the inputs as read and the workspace.
using Compute = void (*)(const Shape&, const Algo&, const float*, const float*, float*, float*);
struct Buffer {
  const void* p;
  std::size_t floats;
};
cudnnStatus_t convolve(cudnnHandle_t h, const char* call, Dir dir, int algo, const Shape& s,
                       const void* alpha, const void* beta, Buffer in1, Buffer in2, Buffer out,
                       void* ws, std::size_t ws_bytes, Compute compute) {
  const Algo* a = find_algo(dir, algo);
  if (a == nullptr)
    return bad(CUDNN_STATUS_NOT_SUPPORTED,
               std::string(call) + ": algorithm " + std::to_string(algo));
  const float al = scalar(alpha), be = scalar(beta);
  const Algo alg = *a;
  auto* o = static_cast<float*>(const_cast<void*>(out.p));
  const auto* i1 = static_cast<const float*>(in1.p);
  const auto* i2 = static_cast<const float*>(in2.p);
  return run(h, call, alg, s, ws, ws_bytes, {{in1.p, in1.floats * 4}, {in2.p, in2.floats * 4}},
             {out.p, out.floats * 4},
             [s, alg, i1, i2, in1, in2, o, out, al, be, compute](float* w) {
               const Result r(o, out.floats, al, be);
               compute(s, alg, as_read(0, i1, in1.floats, s.tf32),
                       as_read(1, i2, in2.floats, s.tf32), w, r.r);
               r.finish();
             });
}

// What every convolution entry point checks first, in cuDNN's order: the handle, the data
// pointers, then the descriptors' shapes (x, w, conv, y: the forward roles, whichever direction).
cudnnStatus_t check_call(const char* call, cudnnHandle_t h, std::initializer_list<const void*> ps,
                         const TensorDescImpl* x, const FilterDescImpl* w, const ConvDescImpl* c,
                         const TensorDescImpl* y, Shape* s) {
  if (!handle_ok(h)) return CUDNN_STATUS_BAD_PARAM;
  for (const void* p : ps)
    if (p == nullptr)
      return bad(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(call) + ": a NULL pointer");
  return shape_of(call, x, w, c, y, s);
}

}  // namespace

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha,
                                      cudnnTensorDescriptor_t xd, const void* x,
                                      cudnnFilterDescriptor_t wd, const void* w,
                                      cudnnConvolutionDescriptor_t c,
                                      cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_bytes,
                                      const void* beta, cudnnTensorDescriptor_t yd, void* y) {
  const char* call = "cudnnConvolutionForward";
  Shape s;
  if (cudnnStatus_t e = check_call(call, h, {alpha, beta, x, w, y}, xd, wd, c, yd, &s)) return e;
  return convolve(h, call, Dir::kFwd, algo, s, alpha, beta, {x, s.x_floats()}, {w, s.w_floats()},
                  {y, s.y_floats()}, ws, ws_bytes,
                  [](const Shape& s, const Algo& a, const float* x, const float* w, float* ws,
                     float* y) { a.uses_ws ? fwd_gemm(s, x, w, ws, y) : fwd_direct(s, x, w, y); });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha,
                                             cudnnTensorDescriptor_t xd, const void* x,
                                             cudnnTensorDescriptor_t dyd, const void* dy,
                                             cudnnConvolutionDescriptor_t c,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* ws,
                                             size_t ws_bytes, const void* beta,
                                             cudnnFilterDescriptor_t dwd, void* dw) {
  const char* call = "cudnnConvolutionBackwardFilter";
  Shape s;
  if (cudnnStatus_t e = check_call(call, h, {alpha, beta, x, dy, dw}, xd, dwd, c, dyd, &s))
    return e;
  return convolve(
      h, call, Dir::kBwdFilter, algo, s, alpha, beta, {x, s.x_floats()}, {dy, s.y_floats()},
      {dw, s.w_floats()}, ws, ws_bytes,
      [](const Shape& s, const Algo& a, const float* x, const float* dy, float* ws, float* dw) {
        bwd_filter(s, x, dy, iota(s.n, !a.deterministic), a.uses_ws ? ws : nullptr, dw);
      });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha,
                                           cudnnFilterDescriptor_t wd, const void* w,
                                           cudnnTensorDescriptor_t dyd, const void* dy,
                                           cudnnConvolutionDescriptor_t c,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* ws,
                                           size_t ws_bytes, const void* beta,
                                           cudnnTensorDescriptor_t dxd, void* dx) {
  const char* call = "cudnnConvolutionBackwardData";
  Shape s;
  if (cudnnStatus_t e = check_call(call, h, {alpha, beta, w, dy, dx}, dxd, wd, c, dyd, &s))
    return e;
  return convolve(
      h, call, Dir::kBwdData, algo, s, alpha, beta, {w, s.w_floats()}, {dy, s.y_floats()},
      {dx, s.x_floats()}, ws, ws_bytes,
      [](const Shape& s, const Algo& a, const float* w, const float* dy, float* ws, float* dx) {
        if (a.uses_ws)
          bwd_data_gemm(s, w, dy, ws, dx);
        else
          bwd_data(s, w, dy, iota(s.k, !a.deterministic), dx);
      });
}

// cublas.cc (gpurun CUDA stand-in): cublasSgemm with cuBLAS's argument rules (sizes, transposes,
// leading dimensions: CUBLAS_STATUS_INVALID_VALUE), the handle's stream (so it can be captured),
// its math mode (TF32 rounds the inputs as tensor cores do) and its workspace, which is
// scribbled over after every call so no code can rely on what it held. C is not read when beta
// is zero, as cuBLAS promises (nor by BLAS). The product itself is OpenBLAS's sgemm.
#include <cblas.h>

#include <cstring>
#include <vector>

#include "core.h"
#include "cublas_v2.h"
#include "tf32.h"

namespace gpurun_standin {

struct CublasImpl {
  Device* device = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;  // nullptr: cuBLAS's own pool
  std::size_t workspace_bytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  bool alive = true;
};

namespace {

cublasStatus_t invalid(const std::string& why) {
  say("cublasSgemm: " + why + " (CUBLAS_STATUS_INVALID_VALUE)");
  return CUBLAS_STATUS_INVALID_VALUE;
}

// Bytes of a column-major rows x cols matrix with leading dimension ld.
std::size_t footprint(int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return 0;
  return (std::size_t(cols - 1) * std::size_t(ld) + std::size_t(rows)) * sizeof(float);
}

// A copy of a rows x cols matrix rounded to TF32 (leading dimension kept).
std::vector<float> tf32_copy(const float* a, int rows, int cols, int ld) {
  std::vector<float> out(footprint(rows, cols, ld) / sizeof(float));
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r) {
      const std::size_t i = std::size_t(c) * std::size_t(ld) + std::size_t(r);
      out[i] = to_tf32(a[i]);
    }
  return out;
}

}  // namespace
}  // namespace gpurun_standin

using namespace gpurun_standin;

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Device* d = current_device();
  if (d == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (unsafe_call("cublasCreate (it allocates device memory)") != cudaSuccess)
    return CUBLAS_STATUS_ALLOC_FAILED;
  auto* h = new CublasImpl;
  hold_for_process_life(h);
  h->device = d;
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (h == nullptr || !h->alive) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->alive = false;  // kept: work enqueued with it may still run (it holds no device memory)
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t stream) {
  if (h == nullptr || !h->alive) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = stream;
  h->workspace = nullptr;  // cuBLAS resets the workspace to its pool on every stream change
  h->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* ws, size_t bytes) {
  if (h == nullptr || !h->alive) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes > 0) {
    std::string why;
    if (reinterpret_cast<std::uintptr_t>(ws) % 256 != 0) {
      say("cublasSetWorkspace: the workspace is not 256-byte aligned (CUBLAS_STATUS_INVALID_VALUE)");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!device_range(ws, bytes, h->device->ordinal, &why)) {
      say("cublasSetWorkspace: " + why + " (CUBLAS_STATUS_INVALID_VALUE)");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  h->workspace = ws;
  h->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (h == nullptr || !h->alive) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_DEFAULT_MATH && mode != CUBLAS_TENSOR_OP_MATH &&
      mode != CUBLAS_PEDANTIC_MATH && mode != CUBLAS_TF32_TENSOR_OP_MATH)
    return CUBLAS_STATUS_INVALID_VALUE;
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  if (h == nullptr || !h->alive) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto op_ok = [](cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; };
  if (m < 0 || n < 0 || k < 0) return invalid("negative m, n or k");
  if (!op_ok(ta) || !op_ok(tb)) return invalid("transa or transb is not N, T or C");
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max(1, a_rows))
    return invalid("lda " + std::to_string(lda) + " < " + std::to_string(std::max(1, a_rows)));
  if (ldb < std::max(1, b_rows))
    return invalid("ldb " + std::to_string(ldb) + " < " + std::to_string(std::max(1, b_rows)));
  if (ldc < std::max(1, m))
    return invalid("ldc " + std::to_string(ldc) + " < " + std::to_string(std::max(1, m)));
  if (alpha == nullptr || beta == nullptr) return invalid("alpha or beta is NULL");
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // Host pointer mode: the scalars are read now.
  const float al = *alpha, be = *beta;
  const bool tf32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  Device& d = *h->device;
  StreamImpl* s = resolve(h->stream, d);
  if (legacy_use(s, "cublasSgemm") != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  void* ws = h->workspace;
  const std::size_t ws_bytes = h->workspace_bytes;
  Work w;
  w.what = "cublasSgemm";
  w.run = [&d, ta, tb, m, n, k, al, be, A, lda, B, ldb, C, ldc, a_rows, a_cols, b_rows, b_cols,
           tf32, ws, ws_bytes]() {
    std::string why;
    if (k > 0 && !device_range(A, footprint(a_rows, a_cols, lda), d.ordinal, &why))
      throw std::runtime_error("cublasSgemm reads A out of bounds: " + why);
    if (k > 0 && !device_range(B, footprint(b_rows, b_cols, ldb), d.ordinal, &why))
      throw std::runtime_error("cublasSgemm reads B out of bounds: " + why);
    if (!device_range(C, footprint(m, n, ldc), d.ordinal, &why))
      throw std::runtime_error("cublasSgemm writes C out of bounds: " + why);
    std::vector<float> a32, b32;
    const float* a = A;
    const float* b = B;
    if (tf32 && k > 0) {
      a32 = tf32_copy(A, a_rows, a_cols, lda), a = a32.data();
      b32 = tf32_copy(B, b_rows, b_cols, ldb), b = b32.data();
    }
    auto t = [](cublasOperation_t o) { return o == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; };
    // BLAS does not read C when beta is zero (OpenBLAS writes zeros), as cuBLAS promises: the NaN
    // cudaMalloc left there cannot leak through 0 * NaN (rules_test pins it).
    if (k > 0) {
      cblas_sgemm(CblasColMajor, t(ta), t(tb), m, n, k, al, a, lda, b, ldb, be, C, ldc);
    } else {
      for (int c = 0; c < n; ++c)
        for (int r = 0; r < m; ++r) {
          float& x = C[std::size_t(c) * ldc + r];
          x = be == 0.0f ? 0.0f : be * x;
        }
    }
    // The product needs no workspace here; a prefix scribbled is enough to break any code that
    // expects the workspace to keep what it held (all 32 MiB every call cost a third of a step).
    if (ws != nullptr) std::memset(ws, kFillByte, std::min<std::size_t>(ws_bytes, 64 << 10));
  };
  return submit(s, std::move(w)) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                : CUBLAS_STATUS_EXECUTION_FAILED;
}

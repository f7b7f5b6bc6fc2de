// cpu_kernels.cc: the choice of CPU library (cpu_kernels.h), the sgemm that follows it (gemm.h),
// and the thread count every library obeys (threads.h). BLIS is loaded with dlopen, never linked:
// it exports the same cblas_/sgemm_ symbols as OpenBLAS, and linking both would let the loader
// pick either for every BLAS call in the process.
#include "gpurun/kernels/cpu_kernels.h"

#include <cblas.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>

#include "gemm.h"
#include "gpurun/kernels/threads.h"
#if GPURUN_HAVE_ONEDNN
#include "onednn.h"
#endif

namespace gpurun::kernels::cpu {
namespace {

std::atomic<CpuKernels> g_kernels{default_cpu_kernels()};
std::atomic<int> g_threads{1};

// BLIS's typed API with row and column strides: a transposition is a swap of the strides, so no
// BLIS enum is needed. dim_t and inc_t are 64-bit in Debian's build (BLIS_INT_TYPE_SIZE 64).
using BliSgemm = void (*)(int trans_a, int trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                          const float* alpha, const float* a, std::int64_t rsa, std::int64_t csa,
                          const float* b, std::int64_t rsb, std::int64_t csb, const float* beta,
                          float* c, std::int64_t rsc, std::int64_t csc);
using BliSetThreads = void (*)(std::int64_t n);
using BliArch = int (*)();
using BliArchString = const char* (*)(int);

struct Blis {
  BliSgemm sgemm = nullptr;
  BliSetThreads set_threads = nullptr;
  std::string arch, error;
};

const Blis& blis() {
  static Blis b;
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef GPURUN_BLIS_LIBRARY
    void* h = ::dlopen(GPURUN_BLIS_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) h = ::dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#else
    void* h = ::dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
    if (!h) {
      b.error = std::string("BLIS is not installed (") + ::dlerror() + "; Debian: libblis4)";
      return;
    }
    b.sgemm = reinterpret_cast<BliSgemm>(::dlsym(h, "bli_sgemm"));
    b.set_threads = reinterpret_cast<BliSetThreads>(::dlsym(h, "bli_thread_set_num_threads"));
    auto query = reinterpret_cast<BliArch>(::dlsym(h, "bli_arch_query_id"));
    auto name = reinterpret_cast<BliArchString>(::dlsym(h, "bli_arch_string"));
    if (!b.sgemm || !b.set_threads) b.error = "the BLIS library lacks bli_sgemm";
    if (query && name) b.arch = name(query());
  });
  return b;
}

void apply_threads(CpuKernels k, int n) {
  if (k == CpuKernels::kOpenBlas) openblas_set_num_threads(n);
  if (k == CpuKernels::kBlis && blis().set_threads) blis().set_threads(n);
#if GPURUN_HAVE_ONEDNN
  if (k == CpuKernels::kOneDnn) onednn::set_threads(n);
#endif
}

}  // namespace

const char* name(CpuKernels k) {
  switch (k) {
    case CpuKernels::kOneDnn:
      return "onednn";
    case CpuKernels::kOpenBlas:
      return "openblas";
    case CpuKernels::kBlis:
      return "blis";
  }
  return "?";
}

std::optional<CpuKernels> parse_cpu_kernels(std::string_view text) {
  for (CpuKernels k : {CpuKernels::kOneDnn, CpuKernels::kOpenBlas, CpuKernels::kBlis}) {
    if (text == name(k)) return k;
  }
  return std::nullopt;
}

bool cpu_kernels_available(CpuKernels k, std::string* why_not) {
  std::string why;
  if (k == CpuKernels::kOneDnn && !GPURUN_HAVE_ONEDNN) {
    why = "this build has no oneDNN (libdnnl-dev was missing when it was configured)";
  }
  if (k == CpuKernels::kBlis) why = blis().error;
  if (why_not) *why_not = why;
  return why.empty();
}

CpuKernels default_cpu_kernels() {
  return GPURUN_HAVE_ONEDNN ? CpuKernels::kOneDnn : CpuKernels::kOpenBlas;
}

void set_cpu_kernels(CpuKernels k) {
  std::string why;
  if (!cpu_kernels_available(k, &why)) {
    throw std::invalid_argument(std::string("CPU kernels ") + name(k) + ": " + why);
  }
  g_kernels = k;
  apply_threads(k, g_threads);
}

CpuKernels cpu_kernels() {
  return g_kernels;
}

std::string cpu_kernels_info() {
  switch (cpu_kernels()) {
    case CpuKernels::kOpenBlas:
      return std::string("OpenBLAS (") + openblas_get_corename() + ")";
    case CpuKernels::kBlis:
      return "BLIS (" + (blis().arch.empty() ? std::string("arch ?") : blis().arch) + ")";
    case CpuKernels::kOneDnn:
#if GPURUN_HAVE_ONEDNN
      return onednn::info();
#else
      break;
#endif
  }
  return "?";
}

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("threads must be >= 1, got " + std::to_string(n));
  g_threads = n;
  openblas_set_num_threads(n);  // OpenBLAS also serves the other choices' callers (numpy, ...)
  apply_threads(cpu_kernels(), n);
}

int num_threads() {
  return g_threads;
}

namespace detail {

void sgemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  const bool at = ta == Trans::kYes, bt = tb == Trans::kYes;
  switch (cpu_kernels()) {
    case CpuKernels::kOneDnn:
#if GPURUN_HAVE_ONEDNN
      onednn::sgemm(at, bt, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
#else
      break;
#endif
    case CpuKernels::kBlis:
      // Row-major op(A)(i, j): A[i*lda + j], or A[j*lda + i] when transposed.
      blis().sgemm(0, 0, m, n, k, &alpha, a, at ? 1 : lda, at ? lda : 1, b, bt ? 1 : ldb,
                   bt ? ldb : 1, &beta, c, ldc, 1);
      return;
    case CpuKernels::kOpenBlas:
      break;
  }
  cblas_sgemm(CblasRowMajor, at ? CblasTrans : CblasNoTrans, bt ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace detail
}  // namespace gpurun::kernels::cpu

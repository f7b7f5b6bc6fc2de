// fma_peak: the single-precision FLOP/s one core of this machine sustains at its current clock:
// 16 independent chains of packed fused multiply-adds (AVX-512 where the CPU has it, else
// AVX2), enough to cover the FMA latency on every pipe, timed over ~0.3 s and best of 5. This is
// the "peak" bench/cpu_mnist/run.sh measures the training step's GFLOP/s per core against: an
// FMA counts 2 FLOP. Prints one JSON line: {"isa": ..., "gflops": ...}.
#include <immintrin.h>

#include <chrono>
#include <cstdio>

namespace {

constexpr long kIters = 20'000'000;

template <typename Step>
double run(Step step, int lanes) {
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const auto t = std::chrono::steady_clock::now();
    const float sink = step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    const double flops = 2.0 * lanes * 16 * double(kIters) / s;
    if (flops > best && sink != 12345.0f) best = flops;
  }
  return best;
}

__attribute__((target("avx512f"))) float chains512() {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long n = 0; n < kIters; ++n) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float chains256() {
  __m256 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long n = 0; n < kIters; ++n) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

}  // namespace

int main() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const double f = avx512 ? run(chains512, 16) : run(chains256, 8);
  std::printf("{\"isa\": \"%s\", \"gflops\": %.1f}\n", avx512 ? "avx512" : "avx2", f / 1e9);
  return 0;
}

// bench_timing.h: the benchmarks' timer. best_ms runs f once to warm up (primitives, packing
// buffers and caches are made then), then `repeats` times, and returns the fastest run in
// milliseconds: other work on the machine only ever slows a run down.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>

inline double best_ms(int repeats, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  return best;
}

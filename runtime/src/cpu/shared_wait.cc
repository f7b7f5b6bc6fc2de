// shared_wait.cc: see shared_wait.h.
#include "shared_wait.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "worker_pool.h"  // spin_pause

namespace gpurun::runtime::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// Spins before yielding: the other member is usually a few microseconds away.
constexpr unsigned kSpins = 1u << 14;

std::string seconds_text(double s) {
  char out[32];
  std::snprintf(out, sizeof out, "%g", s);
  return out;
}

}  // namespace

SharedWaits::SharedWaits(RankArrivals* progress, int rank, int ranks, double timeout_s)
    : progress_(progress), rank_(rank), ranks_(ranks), timeout_s_(timeout_s) {
  if (!(timeout_s > 0)) {
    throw std::invalid_argument("CPU options: comm_timeout_s (seconds a shared-memory exchange "
                                "waits for a peer) must be > 0, got " + seconds_text(timeout_s));
  }
  progress_[rank_].pid.store(std::int64_t(::getpid()), std::memory_order_relaxed);
}

void SharedWaits::arrive(Counter& c) const {
  progress_[rank_].arrivals.fetch_add(1, std::memory_order_relaxed);
  c.n.fetch_add(1, std::memory_order_release);
}

void SharedWaits::wait(const Counter& c, std::uint64_t target, const char* what,
                       std::uint64_t step) const {
  if (c.n.load(std::memory_order_acquire) >= target) return;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_s_);
  for (unsigned spins = 0; c.n.load(std::memory_order_acquire) < target; ++spins) {
    if (spins < kSpins) {
      spin_pause();
      continue;
    }
    sched_yield();
    if (spins % 64 == 0 && Clock::now() >= deadline) {
      const std::uint64_t have = c.n.load(std::memory_order_acquire);
      throw SharedWaitTimeout(
          "shared-memory exchange: rank " + std::to_string(rank_) + " waited " +
          seconds_text(timeout_s_) + " s (the communication timeout) at step " +
          std::to_string(step + 1) + " for " + what + " (" + std::to_string(have) + " of " +
          std::to_string(target) + " arrivals); behind: " + behind() +
          ". Is that rank stopped, stuck or dead?");
    }
  }
}

std::string SharedWaits::behind() const {
  std::uint64_t most = 0, least = UINT64_MAX;
  for (int r = 0; r < ranks_; ++r) {
    const std::uint64_t a = progress_[r].arrivals.load(std::memory_order_relaxed);
    most = std::max(most, a);
    least = std::min(least, a);
  }
  if (least == most) {
    return "no rank (every rank arrived " + std::to_string(most) +
           " times: a thread of one of them is stuck)";
  }
  std::string out;
  for (int r = 0; r < ranks_; ++r) {
    if (progress_[r].arrivals.load(std::memory_order_relaxed) != least) continue;
    out += (out.empty() ? "rank " : ", rank ") + std::to_string(r) + " (pid " +
           std::to_string(progress_[r].pid.load(std::memory_order_relaxed)) + ")";
  }
  return out + ", " + std::to_string(least) + " arrivals against " + std::to_string(most);
}

}  // namespace gpurun::runtime::cpu

// worker_pool.h (private): a fixed set of threads that run one function on every worker and wait
// for all of them: the intra-process half of data parallelism (--threads T trains T replicas on
// slices of the rank's batch). Worker 0 is the calling thread, so MPI stays on the main thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpurun::runtime {

// One step of a spin-wait: tells the core the loop is waiting (x86 PAUSE), else nothing.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class WorkerPool {
 public:
  explicit WorkerPool(int workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return workers_; }
  // Runs fn(w) for w in [0, size()) concurrently and returns when all are done; the first
  // exception thrown by any worker is rethrown here.
  void run(const std::function<void(int)>& fn);

 private:
  void loop(int w);

  int workers_;
  bool spin_;  // wait by spinning first: only with no more workers than usable CPUs
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;  // under mu_
  std::atomic<unsigned long> generation_{0};       // changed under mu_, read by spinners too
  std::atomic<int> pending_{0};                    // workers yet to finish this run
  bool stop_ = false;                              // under mu_
  std::exception_ptr error_;
};

// [lo, hi) of worker w's share of n items (contiguous, sizes differing by at most one).
inline void share(std::size_t n, int workers, int w, std::size_t& lo, std::size_t& hi) {
  lo = n * std::size_t(w) / std::size_t(workers);
  hi = n * std::size_t(w + 1) / std::size_t(workers);
}

}  // namespace gpurun::runtime

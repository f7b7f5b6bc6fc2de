// worker_pool.cc: generation-counted start/finish handshake. Each side spins a short while
// before it sleeps on a condition variable: run() is called three times a training step, a few
// microseconds apart, and on a VM a sleeping thread's wake-up (a futex and an IPI through the
// hypervisor) costs tens of microseconds each time (measured 2026-11-23, --threads 2 at 32
// images a thread: +2.5% images/s, six interleaved pairs). With more workers than CPUs a spinner
// only keeps the one it waits for off a core, so then nobody spins.
#include "worker_pool.h"

#include <sched.h>

#include <chrono>

namespace gpurun::runtime {
namespace {

// The CPUs this process may run on (mpirun --bind-to core leaves each rank one).
int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// Spins up to about kSpinTime until ready() holds; false when it did not.
template <class F>
bool spin_until(F ready) {
  constexpr auto kSpinTime = std::chrono::microseconds(200);
  const auto until = std::chrono::steady_clock::now() + kSpinTime;
  for (unsigned spins = 1;; ++spins) {
    if (ready()) return true;
    spin_pause();
    if (spins % 256 == 0 && std::chrono::steady_clock::now() > until) return ready();
  }
}

}  // namespace

WorkerPool::WorkerPool(int workers)
    : workers_(workers < 1 ? 1 : workers), spin_(workers_ <= usable_cpus()) {
  for (int w = 1; w < workers_; ++w) threads_.emplace_back([this, w] { loop(w); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::run(const std::function<void(int)>& fn) {
  if (workers_ == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    error_ = nullptr;
    pending_.store(workers_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);  // publishes job_ to spinning workers
  }
  start_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!(spin_ && spin_until(done))) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, done);
  }
  std::lock_guard<std::mutex> lock(mu_);  // error_ is written under it
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void WorkerPool::loop(int w) {
  unsigned long seen = 0;
  for (;;) {
    auto started = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!(spin_ && spin_until(started))) {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, started);
    }
    seen = generation_.load(std::memory_order_acquire);
    const std::function<void(int)>* job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      job = job_;
    }
    std::exception_ptr err;
    try {
      (*job)(w);
    } catch (...) {
      err = std::current_exception();
    }
    if (err) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = err;
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the waiter checks pending_ under it: no lost wake
      done_.notify_one();
    }
  }
}

}  // namespace gpurun::runtime

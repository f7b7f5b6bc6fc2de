// periodic.cc: see periodic.h.
#include "gpurun/common/periodic.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gpurun::common {

PeriodicThread::PeriodicThread(std::chrono::milliseconds period, std::function<bool()> task)
    : period_(period),
      task_(std::move(task)),
      event_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      stopping_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!event_ || !stopping_)
    throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { loop(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

PeriodicThread::~PeriodicThread() {
  stop();
}

void PeriodicThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  const std::uint64_t one = 1;
  (void)!::write(stopping_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

bool PeriodicThread::stopping() const {
  pollfd p{stopping_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

void PeriodicThread::notify() {
  const std::uint64_t one = 1;
  (void)!::write(event_.get(), &one, sizeof one);
}

void PeriodicThread::drain() {
  std::uint64_t n;
  while (::read(event_.get(), &n, sizeof n) > 0) {
  }
}

void PeriodicThread::run_soon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    soon_ = true;
  }
  cv_.notify_all();
}

void PeriodicThread::loop() {
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    soon_ = false;
    lock.unlock();
    const bool again = task_();
    lock.lock();
    if (!again) return;
    next += period_;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;
    cv_.wait_until(lock, next, [this] { return stop_ || soon_; });
    if (soon_) next = std::chrono::steady_clock::now();
  }
}

}  // namespace gpurun::common

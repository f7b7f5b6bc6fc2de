// nccl_comm.cc: NCCL communicator (non-blocking init with a deadline), the watchdog thread, the
// NCCL-or-MPI choice and the polling wait. See nccl_comm.h.
#include "nccl_comm.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>
#include <stdexcept>
#include <vector>

#include "gpurun/cuda_support/check.cuh"
#include "gpurun/cuda_support/owners.h"
#include "gpurun/common/posix.h"

namespace gpurun::runtime::cuda {
namespace {

using Clock = std::chrono::steady_clock;

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

int g_rank = -1;  // for messages from code that has no process group at hand

}  // namespace

std::string rank_label(int rank) {
  return "rank " + std::to_string(rank) + " (" + common::hostname() + ")";
}

[[noreturn]] void nccl_fail(ncclResult_t r, const char* last_error, const char* expr,
                            const char* file, int line) {
  std::string msg = std::string("NCCL error: ") + expr + " failed at " + file + ":" +
                    std::to_string(line) + " on " + rank_label(g_rank) + ": " +
                    ncclGetErrorString(r);
  if (last_error && *last_error) msg += std::string(" (") + last_error + ")";
  if (r == ncclSystemError || r == ncclRemoteError) {
    msg +=
        "; hint: a peer may have died, or the network is unreachable (NCCL_DEBUG=INFO says more)";
  }
  throw std::runtime_error(msg);
}

[[noreturn]] void comm_failure(const std::string& why, OnCommFailure policy) {
  ::gpurun::cuda_support::mark_device_lost();
  if (policy == OnCommFailure::kThrow) throw std::runtime_error(why);
  // One write, then out: no destructor, no atexit handler, no cudaFree (nccl_comm.h).
  const std::string line = "gpurun watchdog: " + why + "; exiting without freeing device memory\n";
  (void)!::write(2, line.data(), line.size());
  ::_exit(kCommFailureExit);
}

const char* to_string(AllreduceBackend b) {
  switch (b) {
    case AllreduceBackend::kNone:
      return "none";
    case AllreduceBackend::kNccl:
      return "nccl";
    case AllreduceBackend::kHostMpi:
      return "mpi-host-staged";
  }
  return "?";
}

AllreduceBackend choose_backend(ProcessGroup& pg, int device, bool multi_rank_gpu_env,
                                std::string* why) {
  if (pg.size() == 1) return AllreduceBackend::kNone;
  // Every rank's "host|pci-bus-id", gathered with one broadcast per rank (setup only, W small).
  constexpr std::size_t kLen = 256;
  std::vector<char> table(kLen * std::size_t(pg.size()), 0);
  char bus[64] = {0};
  GPURUN_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, device));
  const std::string me = common::hostname() + "|" + bus;
  std::strncpy(&table[kLen * std::size_t(pg.rank())], me.c_str(), kLen - 1);
  for (int r = 0; r < pg.size(); ++r) pg.broadcast(&table[kLen * std::size_t(r)], kLen, r);
  std::set<std::string> seen;
  std::string dup;
  for (int r = 0; r < pg.size() && dup.empty(); ++r) {
    const std::string id(&table[kLen * std::size_t(r)]);
    if (!seen.insert(id).second) dup = id;
  }
  if (dup.empty()) return AllreduceBackend::kNccl;
  int version = 0;
  GPURUN_NCCL_CHECK(ncclGetVersion(&version));
  if (version >= 23000 && multi_rank_gpu_env) {
    if (why)
      *why = "two ranks share GPU " + dup + "; NCCL " + std::to_string(version) +
             " allows it with NCCL_MULTI_RANK_GPU_ENABLE=1";
    return AllreduceBackend::kNccl;
  }
  if (why) {
    *why = "two ranks share GPU " + dup + " and NCCL " + std::to_string(version) +
           " refuses that (\"Duplicate GPU detected\"): gradients are summed through host "
           "memory with MPI instead";
  }
  return AllreduceBackend::kHostMpi;
}

NcclComm::NcclComm(ProcessGroup& pg, double timeout_s)
    : rank_(pg.rank()), size_(pg.size()), timeout_s_(timeout_s) {
  g_rank = rank_;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank_ == 0) GPURUN_NCCL_CHECK(ncclGetUniqueId(&id));
  pg.broadcast(&id, sizeof id, 0);  // MPI_Bcast through the runtime's process group
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; we poll, so nothing can hang unbounded
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    nccl_fail(r, nullptr, "ncclCommInitRankConfig", __FILE__, __LINE__);
  }
  try {
    wait_ready("NCCL communicator init (did every rank start and reach it?)");
  } catch (...) {
    abort();
    throw;
  }
}

NcclComm::~NcclComm() {
  if (aborted_.load() || comm_ == nullptr) return;
  // Finalize flushes outstanding work; bounded like everything else, abort if it does not finish.
  std::lock_guard<std::mutex> lock(mu_);
  ncclResult_t r = ncclCommFinalize(comm_);
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  ncclResult_t state = r;
  while (state == ncclInProgress && Clock::now() < deadline) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

void NcclComm::wait_ready(const char* what) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_s_);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_.load())
        throw std::runtime_error(what + std::string(": communicator aborted on ") +
                                 rank_label(rank_));
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
      if (q != ncclSuccess) nccl_fail(q, nullptr, "ncclCommGetAsyncError", __FILE__, __LINE__);
    }
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      nccl_fail(state, ncclGetLastError(comm_), what, __FILE__, __LINE__);
    }
    if (Clock::now() >= deadline) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f", timeout_s_);
      throw std::runtime_error(std::string(what) + " did not complete within " + secs +
                               " s (the communication timeout) on " + rank_label(rank_) + " of " +
                               std::to_string(size_) + " ranks; a rank never joined or is stuck");
    }
    // An enqueue in non-blocking mode ends in microseconds: yield at first, sleep once it lasts.
    if (Clock::now() - start < std::chrono::microseconds(200))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void NcclComm::allreduce_sum(const float* send, float* recv, std::size_t n, cudaStream_t s,
                             const char* what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load())
      throw std::runtime_error("NCCL communicator was aborted on " + rank_label(rank_));
    GPURUN_NCCL_CHECK(ncclAllReduce(send, recv, n, ncclFloat32, ncclSum, comm_, s));
    last_ = "ncclAllReduce of " + std::to_string(n) + " floats" +
            (*what ? std::string(" (") + what + ")" : std::string());
  }
  wait_ready("ncclAllReduce enqueue");
}

std::string NcclComm::last_collective() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_.empty() ? "no collective yet" : last_;
}

void NcclComm::abort() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.exchange(true) || comm_ == nullptr) return;
  ncclCommAbort(comm_);  // also stops the communicator's kernels in flight
  comm_ = nullptr;
}

ncclResult_t NcclComm::async_error() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load() || comm_ == nullptr) return ncclInvalidUsage;
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return ncclInternalError;
  return state;
}

Watchdog::Watchdog(NcclComm& comm, double timeout_s, OnCommFailure policy)
    : comm_(comm), timeout_s_(timeout_s), policy_(policy), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::begin_wait(const char* what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_for_ = what;
  }
  wait_start_ns_.store(now_ns());
}
void Watchdog::end_wait() {
  wait_start_ns_.store(0);
}

void Watchdog::check() const {
  if (!failed_.load()) return;
  std::lock_guard<std::mutex> lock(mu_);
  throw std::runtime_error(message_);
}

void Watchdog::fire(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load()) return;
    message_ = why;
  }
  comm_.abort();
  ::gpurun::cuda_support::mark_device_lost();
  if (policy_ == OnCommFailure::kExitProcess) comm_failure(why, policy_);
  failed_.store(true);
  // Said here too: the training thread may be blocked somewhere the exception cannot reach soon.
  std::cerr << "gpurun watchdog: " << why << std::endl;
}

void Watchdog::run() {
  // 50 ms: fine enough for second-scale timeouts, and the poll costs microseconds.
  constexpr auto kPeriod = std::chrono::milliseconds(50);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, kPeriod);
    if (stop_ || failed_.load()) continue;
    lock.unlock();
    const ncclResult_t e = comm_.async_error();
    if (e != ncclSuccess && e != ncclInProgress && !comm_.aborted()) {
      fire(std::string("NCCL reported ") + ncclGetErrorString(e) + " on " +
           rank_label(comm_.rank()) + " of " + std::to_string(comm_.size()) + " ranks during " +
           comm_.last_collective() + "; communicator aborted");
    }
    const long long t0 = wait_start_ns_.load();
    if (t0 != 0 && double(now_ns() - t0) * 1e-9 > timeout_s_) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f", timeout_s_);
      std::string what;
      {
        std::lock_guard<std::mutex> lock(mu_);
        what = waiting_for_;
      }
      fire(what + " did not complete within the communication " +
           "timeout of " + secs + " s on " + rank_label(comm_.rank()) + " of " +
           std::to_string(comm_.size()) + " ranks: " + comm_.last_collective() +
           " never finished; a peer died or is stuck; communicator aborted");
    }
    lock.lock();
  }
}

void wait_event(cudaEvent_t ev, Watchdog* wd, const char* what) {
  if (wd) wd->begin_wait(what);
  struct EndWait {
    Watchdog* w;
    ~EndWait() {
      if (w) w->end_wait();
    }
  } end{wd};
  // Spin briefly (steps finish in microseconds), then back off to sleeping.
  for (int i = 0;; ++i) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      if (wd) wd->check();  // an abort is the better explanation of a failed kernel
      ::gpurun::cuda_support::fail("CUDA", cudaGetErrorString(e), what, __FILE__,
                                            __LINE__);
    }
    (void)cudaGetLastError();  // the runtime may keep "not ready" as the last error (PyTorch
                               // clears it too); a later check must not read it as a failure
    if (wd) wd->check();
    if (i > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace gpurun::runtime::cuda

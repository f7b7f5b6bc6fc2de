// nccl_comm.h: the job's NCCL communicator and its watchdog, plus the choice between NCCL and the
// host-staged MPI allreduce. The communicator is created non-blocking so that neither a rank that
// never joins nor a collective that never finishes can hang the job: init is polled against a
// deadline, and a watchdog thread polls ncclCommGetAsyncError and the time the host has waited
// for device work, calling ncclCommAbort (never ncclCommDestroy) when either goes wrong.
// Private to runtime/src/cuda (and its tests, which include it directly).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <iosfwd>
#include <mutex>
#include <string>
#include <thread>

#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime::cuda {

[[noreturn]] void nccl_fail(ncclResult_t r, const char* last_error, const char* expr,
                            const char* file, int line);

#define GPURUN_NCCL_CHECK(expr)                                                          \
  do {                                                                                   \
    const ncclResult_t gpurun_r_ = (expr);                                               \
    if (gpurun_r_ != ncclSuccess && gpurun_r_ != ncclInProgress)                         \
      ::gpurun::runtime::cuda::nccl_fail(gpurun_r_, nullptr, #expr, __FILE__, __LINE__); \
  } while (0)

// The exit status of a rank ended by OnCommFailure::kExitProcess (backend.h).
constexpr int kCommFailureExit = 1;

// Reports a failed collective by `policy`: throws std::runtime_error(why) under kThrow, else
// prints it and ends the process. The caller has aborted what it could.
[[noreturn]] void comm_failure(const std::string& why, OnCommFailure policy);

// How the GPU ranks sum their gradients. kNone: one rank.
enum class AllreduceBackend { kNone, kNccl, kHostMpi };
// "none", "nccl", "mpi-host-staged": the report's `exchange`.
const char* to_string(AllreduceBackend b);

// "rank R (host)", for messages.
std::string rank_label(int rank);

// NCCL when it can serve every rank, else the host-staged MPI path; kNone for one rank. All ranks
// reach the same answer (they compare the same table of host + PCI bus id per rank). NCCL <= 2.29
// refuses two ranks on one GPU ("Duplicate GPU detected"); NCCL >= 2.30 accepts it with
// NCCL_MULTI_RANK_GPU_ENABLE=1 (experimental), which `multi_rank_gpu_env` passes in.
AllreduceBackend choose_backend(ProcessGroup& pg, int device, bool multi_rank_gpu_env,
                                std::string* why);

class NcclComm {
 public:
  // Collective over pg: rank 0 draws the unique id and broadcasts it through pg (MPI_Bcast); the
  // non-blocking init is polled until ready. If it is not ready within timeout_s (a rank never
  // joined) or fails, the communicator is aborted and std::runtime_error names this rank and host.
  NcclComm(ProcessGroup& pg, double timeout_s);
  ~NcclComm();  // finalize + destroy when healthy; abort otherwise
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Sum of n floats over all ranks, enqueued on s (legal inside stream capture). send == recv is
  // in place. `what` says what is summed, for messages ("the gradients").
  void allreduce_sum(const float* send, float* recv, std::size_t n, cudaStream_t s,
                     const char* what = "");
  // The collective enqueued last, for messages: "ncclAllReduce of 2770634 floats (the gradients)".
  std::string last_collective() const;
  // Thread-safe; the first call aborts the communicator, later calls do nothing.
  void abort() noexcept;
  bool aborted() const { return aborted_.load(); }
  // ncclSuccess, ncclInProgress or the communicator's asynchronous error; never throws.
  ncclResult_t async_error() noexcept;
  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }

 private:
  void wait_ready(const char* what);  // polls a non-blocking call to completion, bounded

  mutable std::mutex mu_;  // serialises host-side NCCL calls with the watchdog's abort
  ncclComm_t comm_ = nullptr;
  std::string last_;
  std::atomic<bool> aborted_{false};
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 60;
};

// Watches one communicator from its own thread. The trainer brackets every host wait for device
// work with begin_wait(what)/end_wait(); a wait longer than the timeout, or an asynchronous NCCL
// error, aborts the communicator, marks the device lost and acts by the policy: the message names
// the rank, its host, what was waited for and the collective. Under kThrow, check() (and
// wait_event) throw it on the training thread; the trainer checks before every launch too.
class Watchdog {
 public:
  Watchdog(NcclComm& comm, double timeout_s, OnCommFailure policy = OnCommFailure::kExitProcess);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void begin_wait(const char* what);
  void end_wait();
  bool failed() const { return failed_.load(); }
  void check() const;  // throws std::runtime_error with the recorded failure

 private:
  void run();
  void fire(const std::string& why);

  NcclComm& comm_;
  double timeout_s_;
  OnCommFailure policy_;
  std::atomic<bool> failed_{false};
  std::atomic<long long> wait_start_ns_{0};  // 0: not waiting
  std::string waiting_for_;  // under mu_
  mutable std::mutex mu_;
  std::string message_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Waits for `ev` by polling (a blocking cudaEventSynchronize could not be interrupted), under the
// watchdog when there is one. Throws on a CUDA error or when the watchdog fires; `what` names the
// wait in messages.
void wait_event(cudaEvent_t ev, Watchdog* wd, const char* what);

}  // namespace gpurun::runtime::cuda

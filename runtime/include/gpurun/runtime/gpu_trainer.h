// gpu_trainer.h: the device-resident training loop on one CUDA GPU per rank (built when
// GPURUN_ENABLE_CUDA; library gpurun_runtime_cuda, which defines GPURUN_HAVE_CUDA_TRAINER for its
// users). The dataset is uploaded once; each step (gather, forward, backward, gradient allreduce,
// SGD) is captured once as a CUDA Graph and replayed; the host reads losses back only every
// `loss_every` steps. Gradients are summed with NCCL on their own stream, or, where NCCL cannot
// serve (two ranks on one GPU), through host memory and the process group's MPI allreduce.
// With NCCL, a watchdog turns a stuck or failed collective (or a rank that never joins the
// communicator) into an exception within `comm_timeout_s`; the host-staged MPI path relies on
// the launcher's fail-fast instead (a blocked MPI_Allreduce cannot be interrupted).
// Same TrainConfig, sampler, learning-rate schedule and initial weights as train() (trainer.h).
// No CUDA, NCCL or MPI header here.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "gpurun/runtime/dataset.h"
#include "gpurun/runtime/process_group.h"
#include "gpurun/runtime/trainer.h"

namespace gpurun::runtime {

// True when a CUDA device can be used by this process (driver present, at least one device
// visible, a kernel launches). Never throws.
bool cuda_available() noexcept;

enum class GraphMode { kCapture, kEager };               // --no-graph selects kEager
enum class GpuMath { kFp32, kTf32 };                     // --tf32 selects kTf32
enum class AllreduceBackend { kNone, kNccl, kHostMpi };  // kNone: one rank

struct GpuOptions {
  GraphMode graph = GraphMode::kCapture;
  GpuMath math = GpuMath::kFp32;
  double comm_timeout_s = 60;  // watchdog: a collective (or NCCL init) stuck this long is an error
  int loss_every = 100;        // steps between loss read-backs (and stop-signal agreement)
  bool breakdown = false;      // time kernels vs allreduce per step (adds timing events)
  int record_losses = 0;       // keep the first N per-step mean losses of this rank (tests)
};

struct GpuTrainResult {
  TrainResult train;
  std::string device;    // "cuda:<name>", as the report's `device` field
  std::string versions;  // driver, CUDA runtime, cuDNN, cuBLAS, NCCL actually loaded
  AllreduceBackend backend = AllreduceBackend::kNone;
  bool graph = false;
  // With breakdown: GPU time in compute kernels and in the allreduce, estimated from timed steps;
  // host = time the host thread spent issuing work. Zero otherwise.
  double kernel_seconds = 0, allreduce_seconds = 0, host_seconds = 0;
  std::vector<double> step_losses;  // record_losses first steps: loss sum / batch_per_rank
};

// Chooses the device (CUDA_VISIBLE_DEVICES as the launcher set it; the local rank among several),
// trains, evaluates each epoch on the test split. Throws std::runtime_error naming rank and host on
// CUDA/NCCL failures and on a watchdog timeout; `log` receives rank 0's lines.
GpuTrainResult train_gpu(ProcessGroup& pg, const Dataset& data, const TrainConfig& cfg,
                         const GpuOptions& opt, std::ostream& log);

const char* to_string(AllreduceBackend b);

}  // namespace gpurun::runtime

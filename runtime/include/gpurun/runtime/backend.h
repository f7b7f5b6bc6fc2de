// backend.h: what does a training step, behind one interface, so that the training loop
// (trainer.h) is written once for every device. A backend holds the model's parameters (and
// momentum) where its device wants them, walks an epoch's steps as the loop asks, combines the
// ranks' gradients (CPU: an allreduce or node-shared memory; CUDA: NCCL or a host-staged MPI
// allreduce inside a captured CUDA Graph) and reports what the steps measured when the loop syncs.
// make_backend() exists in every build; asking for CUDA in a build without it says so.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "gpurun/kernels/cpu_kernels.h"
#include "gpurun/runtime/dataset.h"
#include "gpurun/runtime/model_spec.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime {

// What a backend needs of the training run, and nothing of the loop's own settings (epochs,
// learning rates, checkpoints): the trainer makes it from its TrainConfig (trainer.h:
// backend_config()), so that a backend never reads the trainer's types. make_backend checks it
// and names the setting ("batch size per rank ...") in its error.
struct BackendConfig {
  int batch_per_rank = 64;  // images per rank per step (>= 1)
  int eval_batch = 256;     // images per evaluation pass (>= 1; capped: eval_batch_for())
  float momentum = 0.0f;    // SGD momentum (>= 0): 0 keeps no velocity
  float weight_decay = 0.0f;  // >= 0
};

// One epoch as the sampler and the learning-rate schedule lay it out, handed over whole so a
// device can upload it once.
struct EpochPlan {
  std::int64_t epoch = 0;
  std::int64_t first_step = 0;        // the first step to run (> 0 when resuming mid-epoch)
  std::int64_t steps = 0;             // in the whole epoch
  std::vector<std::int32_t> indices;  // steps x batch_per_rank: this rank's samples, step-major
  std::vector<float> lr;              // one learning rate per step
};

// What the steps since the previous sync did, the same on every rank.
struct Progress {
  std::int64_t steps = 0;
  double loss_sum = 0, correct = 0;  // summed over the steps and over all ranks
  bool stop = false;                 // some rank asked to stop: every rank stops here
  std::vector<double> rank_losses;   // this rank's mean loss of each step (tests compare them)
};

struct Evaluation {
  double loss = 0, accuracy = 0;  // means over the whole test split (all ranks' shards)
};

// Seconds spent so far, by kind.
struct BackendTimes {
  double exchange = 0;  // combining gradients across ranks: allreduce, shared-memory barriers
  double kernels = 0;   // CUDA with breakdown: GPU time in compute kernels (estimated); else 0
  double host = 0;      // CUDA: host time spent issuing work
};

struct BackendInfo {
  std::string device;         // the report's `device`: "cpu" or "cuda:<name>"
  std::string exchange;       // "allreduce", "shared", "nccl", "mpi-host-staged" or "none"
  std::string summary;        // the end of the "training:" line, e.g. "shared-memory exchange"
  std::string versions;       // CUDA: driver, runtime, cuDNN, cuBLAS and NCCL as loaded; else ""
  int workers = 1;            // CPU: replicas per rank (--threads)
  bool fused_update = false;  // CPU: SGD inside the Dense layers' weight-gradient sgemm
  bool graph = false;         // CUDA: each step is a CUDA Graph replay
  // Bytes a rank hands to collectives across ranks each step (the report's
  // exchange_bytes_per_step; 0 when nothing leaves the node).
  std::size_t exchange_bytes_per_step = 0;
  // What this run's exchange would hand to the collectives across nodes each step, at any world
  // size (one rank too): the whole gradient buffer, or PowerSGD's thin matrices and the rest
  // (the report's wire_bytes_per_step, the bytes scripts/step_model.py puts on the link).
  std::size_t wire_bytes_per_step = 0;
  std::string compression = "none";  // the report's grad_compression: none, powersgd:R, acp:R,
                                     // or bf16 (local SGD's averages)
  int local_sgd = 0;  // CPU: local SGD's steps between averages (0: an exchange every step)
  bool local_sgd_overlap = false;  // CPU: local SGD's averages overlap the steps after them
};

// Where a sync falls: partway through an epoch; at an epoch's end whose figures can wait for the
// next sync (kEpochEnd: no checkpoint is written there and the run goes on); or where the run
// reads or saves the parameters next (kSettle: an epoch's end otherwise, max_steps, a run's last
// step). A backend that overlaps its syncs with the steps after them (local SGD's averages with
// local_sgd_overlap) starts them at kPartway and kEpochEnd and finishes them at kSettle, so that
// every rank then holds the same parameters; after kEpochEnd the trainer asks for the epoch's
// figures with land_epoch_end() and evaluate_epoch_end(). A backend that does not overlap
// (BackendInfo::local_sgd_overlap false) is never handed kEpochEnd.
enum class SyncAt { kPartway, kEpochEnd, kSettle };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendInfo info() const = 0;
  // Collective: rank 0's parameters (ModelSpec::param_floats() floats) and momentum (the same
  // size, or nullptr for zero) become every rank's. Other ranks' pointers are not read.
  virtual void set_state(const float* params, const float* velocity) = 0;
  // This rank's parameters and momentum (left empty without momentum). Not collective.
  virtual void get_state(std::vector<float>* params, std::vector<float>* velocity) = 0;
  virtual void begin_epoch(const EpochPlan& plan) = 0;
  // Step `step` of the current epoch; stop_requested: this rank received a stop signal.
  virtual void step(std::int64_t step, bool stop_requested) = 0;
  // Collective, at the same step on every rank: at least every sync_every() steps and after the
  // last step of an epoch or of a run. A CPU step combines its statistics with its gradients, so
  // a CPU backend syncs every step for free; a GPU backend reads its device back less often.
  // With overlapped syncs, a partway sync returns the progress of the one before it (the same
  // on every rank; its stop flag then stops every rank here), and a settling sync returns both.
  virtual int sync_every() const = 0;
  virtual Progress sync(SyncAt at) = 0;
  // Collective: loss and accuracy on the dataset's test split, eval_batch images at a time.
  virtual Evaluation evaluate(int eval_batch) = 0;
  // Collective, once after a kEpochEnd sync and before the next sync: the average started there
  // waited for and applied; returns the progress of the epoch's steps it carried.
  virtual Progress land_epoch_end();
  // Collective, after land_epoch_end(): evaluate() of the parameters the epoch ended with,
  // averaged (what a kSettle sync there would have left on every rank), not of this rank's now.
  virtual Evaluation evaluate_epoch_end(int eval_batch);
  virtual BackendTimes times() const = 0;
  // What the end of each epoch's line adds (the CPU shared exchange: each member's share of the
  // split layer, e.g. "split 17:15 blocks"), or "".
  virtual std::string epoch_note() const { return ""; }
};

enum class Device { kCpu, kCuda };

// How the CPU ranks combine their gradients each step.
//  kAllreduce: each rank writes its whole gradient and one MPI_Allreduce sums it; then every rank
//    applies SGD to its own copy of the parameters.
//  kShared: for ranks on one node. The parameters live once, in memory all ranks map. Dense
//    layers defer dW = dZ^T X: each rank leaves its X and dZ in shared memory, and the ranks
//    update the weights by columns from every rank's X and dZ, with the SGD step inside the
//    sgemm (Poseidon's "sufficient factors", without sending them anywhere). A big Dense layer
//    is split by columns: each rank owns some of its inputs and alone computes and updates
//    them, so its weights stay in that rank's cache (a first-layer convolution before it
//    splits with it, by channels); how many follows each rank's measured speed (SplitShares),
//    without changing the bits. Only the small gradients (convolutions, biases) and the step's
//    stats are summed.
//  kHierarchical: kAllreduce's exchange, its sum in three stages (ProcessGroup::
//    allreduce_sum_hierarchical): within each node, across the nodes' first ranks, back within
//    each node; for several ranks a node on several nodes.
//  kAuto: kShared when every rank is on one node and no micro-batching is asked for.
enum class Exchange { kAuto, kAllreduce, kShared, kHierarchical };
const char* exchange_name(Exchange e);  // "auto", "allreduce", "shared", "hierarchical"

// How the shared exchange shares a split layer's column blocks among its members (the rank's
// replicas, rank-major). The result is the same bits whichever member owns which block.
struct SplitShares {
  bool measured = true;         // move the boundaries toward the members' measured speeds
  std::vector<double> weights;  // the starting shares, one weight per member (empty: even)
};

struct CpuOptions {
  // The library under the CPU ops (kernels/cpu_kernels.h): oneDNN by default when built with it.
  kernels::cpu::CpuKernels kernels = kernels::cpu::default_cpu_kernels();
  int threads = 1;      // per rank: replicas on slices of the batch (T ranks' sums, bitwise)
  int micro_batch = 0;  // > 0: accumulate gradients over micro-batches of this size
  Exchange exchange = Exchange::kAuto;
  SplitShares split;
  // The shared exchange: a wait this long for a peer (stopped, stuck or dead) is an error that
  // names the ranks behind; longer than any legitimate gap between two ranks' steps (a
  // checkpoint written on rank 0). MPI's allreduce has no such bound.
  double comm_timeout_s = 300;
  // > 0: PowerSGD of this rank for the Dense layers' gradients (the allreduce exchange only;
  // runtime/src/cpu/powersgd.h); 0: the gradients travel whole.
  int powersgd_rank = 0;
  // With powersgd_rank: alternating PowerSGD (ACP-SGD), one thin matrix and one sum a step.
  bool powersgd_alternate = false;
  // > 0: the allreduce exchange sums the gradient in buckets of about this many floats (whole
  // layers or blocks of a Dense layer's rows, from the last), each started (MPI_Iallreduce) as
  // soon as backward has produced it,
  // so the sums overlap the rest of backward (PyTorch DDP's buckets). One thread, no
  // micro-batches, no PowerSGD, not hierarchical. 0: one allreduce after backward.
  std::size_t bucket_floats = 0;
  // > 0: local SGD (Lin et al., "Don't Use Large Mini-Batches, Use Local SGD", ICLR 2020;
  // PyTorch's PeriodicModelAverager): each rank steps its own copy of the parameters from its own
  // gradient (its threads combined as `exchange` says, one rank alone), and at each sync
  // (sync_every() is local_sgd: every local_sgd steps and at each epoch's end) the ranks average
  // their parameters in one allreduce. A stop signal takes effect there too. Momentum stays each
  // rank's own. Not with PowerSGD, buckets or the hierarchical exchange.
  int local_sgd = 0;
  // With local_sgd: an average sends each rank's change since the last average as bfloat16
  // (half the bytes; PyTorch DDP's bf16_compress_hook does this to gradients) and adds the mean
  // change to the last average, kept on every rank; the ranks still end each average equal.
  bool local_sgd_bf16 = false;
  // With local_sgd: each partway average runs while the next local_sgd steps train
  // (MPI_Iallreduce, moved on after each step) and is applied at the next sync, each rank's own
  // change since kept (Wang et al., "Overlap Local-SGD", 2020): the link's time hides behind
  // the H steps when they are long enough (one MPI_Test a step moves it), and a rank waits for a
  // slower one only when it is over H steps ahead, or where the run settles (SyncAt). Its
  // statistics and a stop request take effect one average later. An epoch's end is overlapped
  // too (SyncAt::kEpochEnd: its line comes at the next average) unless a checkpoint is written
  // there or the run ends there.
  bool local_sgd_overlap = false;
};

enum class GraphMode { kCapture, kEager };  // --no-graph selects kEager
enum class GpuMath { kFp32, kTf32 };        // --tf32 selects kTf32
// --conv-algo: cuDNN's convolution algorithms timed (the fastest; the choice may differ between
// runs, and with it the last bits) or taken from its heuristics (a run repeats bit for bit).
enum class ConvAlgo { kBenchmark, kHeuristic };

// What a GPU rank does when a collective fails (a peer died or is stuck, NCCL reports an
// error); the message names the rank, its host and the collective either way.
//  kExitProcess: c10d's way: abort the communicator, say why on stderr and end the process at
//    once, without freeing device memory (kernels still queued may use the aborted
//    communicator, and a cudaFree could wait on them forever); the launcher stops the others.
//  kThrow: abort, then throw on the training thread; device memory is never freed again in this
//    process (tests that must observe the failure in-process).
enum class OnCommFailure { kExitProcess, kThrow };

struct CudaOptions {
  GraphMode graph = GraphMode::kCapture;
  GpuMath math = GpuMath::kFp32;
  ConvAlgo conv_algo = ConvAlgo::kBenchmark;
  double comm_timeout_s = 60;  // watchdog: a collective (or NCCL init) stuck this long is an error
  int loss_every = 100;        // steps between read-backs of the losses (and stop agreements)
  bool breakdown = false;      // time kernels vs allreduce per step (adds timing events)
  // NCCL >= 2.30 accepts two ranks on one GPU only with NCCL_MULTI_RANK_GPU_ENABLE=1 (read at the
  // program's edge, environment.h); without it such ranks use the host-staged MPI allreduce.
  bool nccl_multi_rank_gpu = false;
  std::string visible_devices;  // CUDA_VISIBLE_DEVICES as the launcher set it, for messages
  // The launcher (gpurun) gave this rank its own GPUs in CUDA_VISIBLE_DEVICES: the first visible
  // one is the rank's. Otherwise (bare mpirun or srun) the node's visible GPUs are dealt out by
  // local rank.
  bool gpus_from_launcher = false;
  OnCommFailure on_comm_failure = OnCommFailure::kExitProcess;
  // > 0 (NCCL only): the gradient's allreduce in buckets of at least this many floats, whole
  // layers from the last, each enqueued on the communication stream as soon as backward's
  // kernels for it are (an event between the streams), inside the captured graph; 0: one
  // allreduce after backward. CpuOptions::bucket_floats's counterpart (--bucket-mb).
  std::size_t bucket_floats = 0;
};

struct BackendOptions {
  Device device = Device::kCpu;
  CpuOptions cpu;
  CudaOptions cuda;
};

// True when this process sees a CUDA device (built with CUDA, a driver, a visible device). No
// kernel is launched to prove it: a listed device that cannot run one fails in make_backend.
// Never throws.
bool cuda_available() noexcept;

// The evaluation batch a backend sizes for and the trainer evaluates with: eval_batch, at most the
// test split's size (a larger one would only hold memory for images that do not exist).
int eval_batch_for(int eval_batch, const Dataset& data);

// The backend for `options.device`. Collective: every rank calls it. A configuration every rank
// can check first, before anything is allocated (cfg's values, a global batch larger than the
// training split, a model that does not fit the data, a CUDA backend in a build without CUDA)
// throws GroupError on every rank (process_group.h); later failures throw
// std::invalid_argument (bad options) or std::runtime_error (the device cannot be used, no
// device) on the ranks that hit them.
// `log` gets rank 0's notes (which exchange was chosen and why).
std::unique_ptr<Backend> make_backend(ProcessGroup& pg, const ModelSpec& model, const Dataset& data,
                                      const BackendConfig& cfg,
                                      const BackendOptions& options, std::ostream& log);

}  // namespace gpurun::runtime

// cuda_backend.cc: the CUDA backend (backend.h). Device-resident: the dataset is uploaded once,
// each epoch's sample indices and learning rates once per epoch, and a step is one CUDA Graph
// replay built from the model's layer list (device_model.h): gather the batch by the device's
// step counter, forward, loss, backward into the flat gradient buffer, ONE allreduce on its own
// stream (NCCL, ordered by events), SGD with 1/world and the scheduled learning rate read on the
// device, and the step counter's advance. Where NCCL cannot serve (two ranks on one GPU) the
// gradients go through pinned host memory and the process group's MPI allreduce, between two
// graphs. The host only launches; it reads losses back at each sync (every loss_every steps).
// A stuck or failed collective (or a rank that never joins) is bounded by comm_timeout_s on both
// paths: NCCL's by a watchdog thread, checked before every launch too; the host-staged MPI sum,
// and the MPI sums of losses and evaluation on both paths, by a polled MPI_Iallreduce. What
// follows is CudaOptions::on_comm_failure (backend.h): by default the rank says which collective
// failed and ends at once, without freeing device memory.
// Everything is allocated at construction (nothing during steps or evaluation), zeroed and
// uploaded on the compute stream.
// Run: mnist_cnn --device cuda; tests: ctest -L gpu.
#include <algorithm>
#include <chrono>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backends.h"
#include "data/sampler.h"
#include "device_model.h"
#include "gpurun/common/strings.h"
#include "gpurun/cuda_support/check.cuh"
#include "gpurun/cuda_support/owners.h"
#include "gpurun/kernels/accuracy.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/sgd.h"
#include "gpurun/kernels/softmax_xent.h"
#include "nccl_comm.h"
#include "step_kernels.h"

namespace gpurun::runtime {

// A device is listed. Not the probe kernel (kernels::cuda_device_count): it runs on device 0, and
// would leave a context (hundreds of MB) of every rank of a bare mpirun on the node's first GPU;
// a listed device that cannot run a kernel then fails loudly in the backend instead.
bool cuda_device_usable() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

namespace {

namespace k = gpurun::kernels;
namespace kc = gpurun::kernels::cuda;
using cuda_support::DeviceBuffer;
using cuda_support::Event;
using cuda_support::EventTiming;
using cuda_support::GraphExec;
using cuda_support::OwnedStream;
using cuda_support::PinnedBuffer;
using Clock = std::chrono::steady_clock;

using common::seconds_since;

// What this process loaded, not what it was compiled against: the device may carry other minor
// versions of the libraries than the build machine.
std::string library_versions() {
  int driver = 0, runtime = 0, nccl = 0, cublas = 0, cublas_minor = 0, cublas_patch = 0;
  GPURUN_CUDA_CHECK(cudaDriverGetVersion(&driver));
  GPURUN_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  GPURUN_NCCL_CHECK(ncclGetVersion(&nccl));
  GPURUN_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &cublas));
  GPURUN_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &cublas_minor));
  GPURUN_CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &cublas_patch));
  auto dotted = [](int v) {  // CUDA encodes 1000*major + 10*minor
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  return "driver CUDA " + dotted(driver) + ", runtime " + dotted(runtime) + ", cuDNN " +
         std::to_string(cudnnGetVersion()) + ", cuBLAS " + std::to_string(cublas) + "." +
         std::to_string(cublas_minor) + "." + std::to_string(cublas_patch) + ", NCCL " +
         std::to_string(nccl);
}

std::string device_name(int dev) {
  cudaDeviceProp prop;
  GPURUN_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

// The launcher's contract (DESIGN: the rank environment): under gpurun, CUDA_VISIBLE_DEVICES
// holds this rank's GPUs only, and its first is the rank's device, whatever the local rank. Under
// a launcher that shows every rank the node's GPUs (bare mpirun, srun), local ranks take them in
// order; more ranks than GPUs share them in contiguous groups, said once. Never local_rank % n:
// that would pick another than the launcher planned for a rank with several GPUs.
int device_for(const ProcessGroup& pg, const CudaOptions& opt, int count) {
  if (opt.gpus_from_launcher) return 0;
  if (pg.local_size() <= count) return pg.local_rank();
  return int(std::int64_t(pg.local_rank()) * count / pg.local_size());
}

int pick_device(ProcessGroup& pg, const CudaOptions& opt, std::ostream& log) {
  // cudaGetDeviceCount, not the probe: the probe launches on device 0, which would put a context
  // (hundreds of MB) of every rank on the node's first GPU.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (count == 0) {
    throw std::runtime_error("no usable CUDA device on " + cuda::rank_label(pg.rank()) +
                             " (CUDA_VISIBLE_DEVICES=" + opt.visible_devices +
                             "); --device cpu (or auto) trains on the CPU and needs none");
  }
  const int dev = device_for(pg, opt, count);
  if (!opt.gpus_from_launcher && pg.local_size() > count && pg.rank() == 0) {
    log << "note: " << pg.local_size() << " ranks on a node share its " << count
        << " visible GPU(s), local ranks in contiguous groups\n";
  }
  GPURUN_CUDA_CHECK(cudaSetDevice(dev));
  return dev;
}

// The device, and the process-wide settings of its kernels, before the model plans its
// convolutions (device_model.cc sizes their workspace under these settings).
int prepare_device(ProcessGroup& pg, const CudaOptions& opt, std::ostream& log) {
  const int dev = pick_device(pg, opt, log);
  kc::set_math_precision(opt.math == GpuMath::kTf32 ? kc::MathPrecision::kTf32
                                                    : kc::MathPrecision::kFp32);
  kc::set_conv_algo_choice(opt.conv_algo == ConvAlgo::kHeuristic ? kc::ConvAlgoChoice::kHeuristic
                                                                 : kc::ConvAlgoChoice::kBenchmark);
  return dev;
}

void upload(void* to, const void* from, std::size_t bytes, cudaStream_t s) {
  if (bytes) GPURUN_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, s));
}

// The dataset, the epoch's plan and this rank's test shard, on the device, with the pinned host
// memory of their read-backs: all of it allocated here, once.
struct DeviceData {
  DeviceData(const Dataset& data, std::size_t steps_per_epoch, int batch,
             const std::vector<std::int32_t>& eval_shard, cudaStream_t s)
      : img(data.train.image_floats()),
        train_px(data.train.pixels.size(), s),
        train_lb(data.train.count, s),
        test_px(data.test.pixels.size(), s),
        test_lb(data.test.count, s),
        idx(steps_per_epoch * std::size_t(batch), s),
        lr_table(steps_per_epoch, s),
        step(1, s),
        lr_cur(1, s),
        loss_hist(steps_per_epoch, s),
        correct_hist(steps_per_epoch, s),
        eval_idx(std::max<std::size_t>(eval_shard.size(), 1), s),
        eval_count(eval_shard.size()),
        h_idx(steps_per_epoch * std::size_t(batch)),
        h_lr(steps_per_epoch),
        h_step(1),
        h_loss_hist(steps_per_epoch),
        h_correct_hist(steps_per_epoch),
        h_eval_loss(std::max<std::size_t>(eval_shard.size(), 1)),
        h_eval_correct(std::max<std::size_t>(eval_shard.size(), 1)) {
    // Once; 47 MB for MNIST's training split. Pageable sources: each call returns once its bytes
    // are staged; the backend waits for the stream before the first step.
    upload(train_px.get(), data.train.pixels.data(), train_px.bytes(), s);
    upload(train_lb.get(), data.train.labels.data(), train_lb.bytes(), s);
    upload(test_px.get(), data.test.pixels.data(), test_px.bytes(), s);
    upload(test_lb.get(), data.test.labels.data(), test_lb.bytes(), s);
    upload(eval_idx.get(), eval_shard.data(), eval_shard.size() * sizeof(std::int32_t), s);
  }

  std::size_t img;
  DeviceBuffer<std::uint8_t> train_px;
  DeviceBuffer<std::int32_t> train_lb;
  DeviceBuffer<std::uint8_t> test_px;
  DeviceBuffer<std::int32_t> test_lb;
  DeviceBuffer<std::int32_t> idx;
  DeviceBuffer<float> lr_table;
  DeviceBuffer<int> step;
  DeviceBuffer<float> lr_cur;
  DeviceBuffer<float> loss_hist;
  DeviceBuffer<std::int64_t> correct_hist;
  DeviceBuffer<std::int32_t> eval_idx;  // this rank's test shard
  std::size_t eval_count;
  PinnedBuffer<std::int32_t> h_idx;
  PinnedBuffer<float> h_lr;
  PinnedBuffer<int> h_step;
  PinnedBuffer<float> h_loss_hist;
  PinnedBuffer<std::int64_t> h_correct_hist;
  PinnedBuffer<float> h_eval_loss;  // one per evaluation batch (at most one per image)
  PinnedBuffer<std::int64_t> h_eval_correct;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(ProcessGroup& pg, const ModelSpec& model, const Dataset& data,
              const BackendConfig& cfg, const CudaOptions& opt, std::ostream& log);

  BackendInfo info() const override { return info_; }
  void set_state(const float* params, const float* velocity) override;
  void get_state(std::vector<float>* params, std::vector<float>* velocity) override;
  void begin_epoch(const EpochPlan& plan) override;
  void step(std::int64_t step, bool stop_requested) override;
  int sync_every() const override { return opt_.loss_every; }
  Progress sync(SyncAt) override;  // every sync settles: nothing runs past it
  Evaluation evaluate(int eval_batch) override;
  BackendTimes times() const override;

 private:
  void mark(int i, cudaStream_t on);
  void enqueue_part1();
  void enqueue_part2();
  void enqueue_backward_in_buckets();
  void host_allreduce();
  template <typename T>
  void bounded_sum(T* data, std::size_t n, const char* what);
  void warm_up_and_capture();
  GraphExec capture(void (CudaBackend::*body)());
  void capture_both();
  void sample_breakdown(std::int64_t steps);

  ProcessGroup& pg_;
  const int batch_;
  const float momentum_, weight_decay_;
  const CudaOptions opt_;
  const std::size_t spe_;
  const int dev_;                      // chosen (cudaSetDevice) before anything is allocated
  OwnedStream compute_, comm_stream_;  // before the buffers, which are zeroed on compute_
  BackendInfo info_;
  cuda::AllreduceBackend exchange_ = cuda::AllreduceBackend::kNone;
  cuda::DeviceModel dm_;
  DeviceData dd_;
  std::unique_ptr<cuda::NcclComm> comm_;
  std::unique_ptr<cuda::Watchdog> wd_;
  PinnedBuffer<float> h_grads_;
  Event ev_fb_, ev_ar_, ev_d2h_, ev_read_;
  std::vector<Event> ev_bucket_;  // --bucket-mb: one a bucket (at most one a layer, and the rest)
  // One per step between syncs: sync() waits for them in turn, so the watchdog's timeout bounds
  // each step (a stuck collective), not the whole window (which may legitimately be long).
  std::vector<Event> step_done_;
  std::vector<Event> t_;  // timing marks of one step: start, after backward, after allreduce, end
  GraphExec g1_, g2_;
  std::int64_t next_step_ = 0, synced_ = 0;
  bool stop_requested_ = false;
  double host_seconds_ = 0, mpi_seconds_ = 0, kernel_est_ = 0, allreduce_est_ = 0;
};

CudaBackend::CudaBackend(ProcessGroup& pg, const ModelSpec& model, const Dataset& data,
                         const BackendConfig& cfg, const CudaOptions& opt, std::ostream& log)
    : pg_(pg),
      batch_(cfg.batch_per_rank),
      momentum_(cfg.momentum),
      weight_decay_(cfg.weight_decay),
      opt_(opt),
      spe_(steps_per_epoch(data.train.count, pg.size(), cfg.batch_per_rank)),
      dev_(prepare_device(pg, opt, log)),
      dm_(model, cfg.batch_per_rank, cfg.eval_batch, cfg.momentum != 0.0f, compute_.get()),
      dd_(data, spe_, cfg.batch_per_rank, eval_shard(data.test.count, pg.size(), pg.rank()),
          compute_.get()),
      h_grads_(0),
      t_(4) {
  if (opt.loss_every < 1) {
    throw std::invalid_argument(
        "CUDA options: loss_every (steps between loss read-backs) must "
        "be >= 1, got " +
        std::to_string(opt.loss_every));
  }
  if (!(opt.comm_timeout_s > 0)) {
    throw std::invalid_argument(
        "CUDA options: comm_timeout_s (seconds before a stuck collective "
        "is an error) must be > 0, got " +
        std::to_string(opt.comm_timeout_s));
  }
  info_.device = "cuda:" + device_name(dev_);
  info_.versions = library_versions();
  log << "versions: " << info_.versions << "\n";
  std::string why;
  exchange_ = cuda::choose_backend(pg, dev_, opt.nccl_multi_rank_gpu, &why);  // the same everywhere
  if (!why.empty() && pg.rank() == 0) log << "note: " << why << "\n";
  if (exchange_ == cuda::AllreduceBackend::kNccl) {
    comm_ = std::make_unique<cuda::NcclComm>(pg, opt.comm_timeout_s);
    wd_ = std::make_unique<cuda::Watchdog>(*comm_, opt.comm_timeout_s, opt.on_comm_failure);
  }
  if (exchange_ == cuda::AllreduceBackend::kHostMpi)
    h_grads_ = PinnedBuffer<float>(dm_.param_floats());
  for (auto& e : t_) e = Event(EventTiming::kOn);
  if (exchange_ == cuda::AllreduceBackend::kNccl && opt.bucket_floats > 0)
    ev_bucket_.resize(model.layers().size() + 1);
  step_done_.resize(std::size_t(opt.loss_every));
  info_.exchange = cuda::to_string(exchange_);
  // NCCL and the host-staged path both allreduce the whole gradient each step ("none": 1 rank).
  info_.exchange_bytes_per_step = info_.exchange == "none" ? 0 : dm_.param_floats() * sizeof(float);
  info_.wire_bytes_per_step = dm_.param_floats() * sizeof(float);
  info_.graph = opt.graph == GraphMode::kCapture;
  const bool buckets = exchange_ == cuda::AllreduceBackend::kNccl && opt.bucket_floats > 0;
  info_.summary = std::string(info_.graph ? "CUDA Graph" : "eager") + ", allreduce " +
                  info_.exchange + (buckets ? " in buckets overlapping backward" : "") +
                  (opt.math == GpuMath::kTf32 ? ", TF32" : ", FP32") +
                  (opt.conv_algo == ConvAlgo::kHeuristic ? ", cuDNN heuristics" : "");
  // The zeroing and the uploads are on compute_; pageable copies may still be landing.
  GPURUN_CUDA_CHECK(cudaStreamSynchronize(compute_.get()));
  warm_up_and_capture();
}

void CudaBackend::mark(int i, cudaStream_t on) {
  // External records become event nodes when captured, so replays can be timed too. CUDA refuses
  // the flag outside a capture (the eager warm-up steps, --no-graph): plain records there.
  if (!opt_.breakdown) return;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  GPURUN_CUDA_CHECK(cudaStreamIsCapturing(on, &capturing));
  const unsigned flags = capturing == cudaStreamCaptureStatusActive ? cudaEventRecordExternal
                                                                    : cudaEventRecordDefault;
  GPURUN_CUDA_CHECK(cudaEventRecordWithFlags(t_[std::size_t(i)].get(), on, flags));
}

// Gather (by the device step counter), forward, loss, backward, and (NCCL) the allreduce forked
// onto its own stream; or (host-staged) the gradients' download.
void CudaBackend::enqueue_part1() {
  const cudaStream_t s = compute_.get();
  const k::Stream S{s};
  mark(0, s);
  cuda::gather_batch(dd_.train_px.get(), dd_.train_lb.get(), dd_.img, dd_.idx.get(), dd_.step.get(),
                     batch_, dd_.lr_table.get(), dd_.lr_cur.get(), dm_.input(), dm_.labels(), S);
  dm_.forward_loss(batch_, 1.0f / float(batch_), S);
  const std::size_t n = dm_.param_floats();
  if (exchange_ == cuda::AllreduceBackend::kNccl && opt_.bucket_floats > 0) {
    enqueue_backward_in_buckets();
    return;
  }
  dm_.backward(batch_, S);
  mark(1, s);
  if (exchange_ == cuda::AllreduceBackend::kNccl) {
    GPURUN_CUDA_CHECK(cudaEventRecord(ev_fb_.get(), s));
    GPURUN_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_.get(), ev_fb_.get(), 0));
    comm_->allreduce_sum(dm_.grads(), dm_.grads(), n, comm_stream_.get(), "the gradients");
    GPURUN_CUDA_CHECK(cudaEventRecord(ev_ar_.get(), comm_stream_.get()));
    GPURUN_CUDA_CHECK(cudaStreamWaitEvent(s, ev_ar_.get(), 0));
  } else if (exchange_ == cuda::AllreduceBackend::kHostMpi) {
    GPURUN_CUDA_CHECK(
        cudaMemcpyAsync(h_grads_.get(), dm_.grads(), n * sizeof(float), cudaMemcpyDeviceToHost, s));
  }
}

// Backward with the NCCL allreduce in buckets (CudaOptions::bucket_floats): each bucket of whole
// layers, from the last, forks onto the communication stream once backward's kernels for it
// are enqueued; the compute stream joins all of them before the update. Each element's sum is
// the one allreduce's (NCCL sums element by element in the same ring order whatever the
// message's length on 2 ranks).
void CudaBackend::enqueue_backward_in_buckets() {
  const cudaStream_t s = compute_.get(), comm = comm_stream_.get();
  std::size_t pending_end = dm_.param_floats(), bucket = 0;
  auto launch = [&](std::size_t from) {
    GPURUN_CUDA_CHECK(cudaEventRecord(ev_bucket_.at(bucket).get(), s));
    GPURUN_CUDA_CHECK(cudaStreamWaitEvent(comm, ev_bucket_[bucket].get(), 0));
    comm_->allreduce_sum(dm_.grads() + from, dm_.grads() + from, pending_end - from, comm,
                         "a bucket of the gradients");
    pending_end = from;
    ++bucket;
  };
  dm_.backward(batch_, k::Stream{s}, [&](std::size_t from) {
    if (pending_end - from >= opt_.bucket_floats) launch(from);
  });
  mark(1, s);
  if (pending_end > 0) launch(0);
  GPURUN_CUDA_CHECK(cudaEventRecord(ev_ar_.get(), comm));
  GPURUN_CUDA_CHECK(cudaStreamWaitEvent(s, ev_ar_.get(), 0));
}

// (Host-staged) the summed gradients back up; then SGD and the step counter's advance.
void CudaBackend::enqueue_part2() {
  const cudaStream_t s = compute_.get();
  const std::size_t n = dm_.param_floats();
  if (exchange_ == cuda::AllreduceBackend::kHostMpi) {
    GPURUN_CUDA_CHECK(
        cudaMemcpyAsync(dm_.grads(), h_grads_.get(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  }
  mark(2, s);
  k::SgdDesc sd;
  sd.n = n;
  sd.momentum = momentum_;
  sd.weight_decay = weight_decay_;
  sd.grad_scale = 1.0f / float(pg_.size());
  kc::sgd_step_device_lr(sd, dd_.lr_cur.get(), dm_.params(), dm_.grads(), dm_.velocity(),
                         k::Stream{s});
  cuda::advance_step(dd_.step.get(), dm_.loss(), dm_.correct(), dd_.loss_hist.get(),
                     dd_.correct_hist.get(), k::Stream{s});
  mark(3, s);
}

void CudaBackend::host_allreduce() {
  const auto t = Clock::now();
  GPURUN_CUDA_CHECK(cudaEventRecord(ev_d2h_.get(), compute_.get()));
  cuda::wait_event(ev_d2h_.get(), wd_.get(), "gradient download");
  bounded_sum(h_grads_.get(), dm_.param_floats(), "the gradients, staged through host memory");
  mpi_seconds_ += seconds_since(t);
}

// Every MPI sum of a step loop is bounded by comm_timeout_s, not the gradients' only: a peer
// stopped between two steps leaves this rank in the next sync's or evaluation's sum.
template <typename T>
void CudaBackend::bounded_sum(T* data, std::size_t n, const char* what) {
  try {
    pg_.allreduce_sum_within(data, n, opt_.comm_timeout_s, what);
  } catch (const CollectiveTimeout& e) {
    cuda::comm_failure(e.what(), opt_.on_comm_failure);
  }
}

GraphExec CudaBackend::capture(void (CudaBackend::*body)()) {
  const cudaStream_t s = compute_.get();
  GPURUN_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    (this->*body)();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(s, &broken);  // leave the stream usable for the error path
    if (broken) cudaGraphDestroy(broken);
    throw;
  }
  cudaGraph_t graph = nullptr;
  GPURUN_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  return GraphExec(graph);
}

void CudaBackend::capture_both() {
  enqueue_part1();
  enqueue_part2();
}

// Warm-up outside capture: loads modules, creates library handles, connects NCCL. It writes only
// activations and gradients (the next step overwrites them); parameters are untouched. The step
// counter, indices and learning rates are zero (valid) until the first epoch sets them.
void CudaBackend::warm_up_and_capture() {
  enqueue_part1();
  if (exchange_ == cuda::AllreduceBackend::kHostMpi) host_allreduce();
  Event warm;  // waited for under the watchdog: this is the job's first collective
  GPURUN_CUDA_CHECK(cudaEventRecord(warm.get(), compute_.get()));
  cuda::wait_event(warm.get(), wd_.get(), "warm-up step (first allreduce)");
  mpi_seconds_ = 0;
  if (!info_.graph) return;
  if (exchange_ == cuda::AllreduceBackend::kHostMpi) {
    g1_ = capture(&CudaBackend::enqueue_part1);
    g2_ = capture(&CudaBackend::enqueue_part2);
  } else {
    g1_ = capture(&CudaBackend::capture_both);
  }
}

void CudaBackend::set_state(const float* params, const float* velocity) {
  const std::size_t n = dm_.param_floats();
  std::vector<float> host(n);
  std::int32_t has_velocity = velocity != nullptr ? 1 : 0;
  if (pg_.rank() == 0) std::copy(params, params + n, host.begin());
  pg_.broadcast(host.data(), n * sizeof(float), 0);
  pg_.broadcast(&has_velocity, sizeof has_velocity, 0);
  const cudaStream_t s = compute_.get();
  upload(dm_.params(), host.data(), n * sizeof(float), s);  // staged: host may be reused
  if (dm_.velocity()) {
    if (has_velocity && pg_.rank() == 0) std::copy(velocity, velocity + n, host.begin());
    if (!has_velocity) std::fill(host.begin(), host.end(), 0.0f);
    if (has_velocity) pg_.broadcast(host.data(), n * sizeof(float), 0);
    upload(dm_.velocity(), host.data(), n * sizeof(float), s);
  }
  GPURUN_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaBackend::get_state(std::vector<float>* params, std::vector<float>* velocity) {
  const std::size_t n = dm_.param_floats();
  const cudaStream_t s = compute_.get();
  params->resize(n);
  // Into pageable memory: each call returns when its copy, after the stream's work, is done.
  GPURUN_CUDA_CHECK(
      cudaMemcpyAsync(params->data(), dm_.params(), n * sizeof(float), cudaMemcpyDeviceToHost, s));
  velocity->clear();
  if (dm_.velocity()) {
    velocity->resize(n);
    GPURUN_CUDA_CHECK(cudaMemcpyAsync(velocity->data(), dm_.velocity(), n * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
  }
  GPURUN_CUDA_CHECK(cudaStreamSynchronize(s));
}

// This rank's indices and learning rates for the whole epoch go up once.
void CudaBackend::begin_epoch(const EpochPlan& plan) {
  std::copy(plan.indices.begin(), plan.indices.end(), dd_.h_idx.get());
  std::copy(plan.lr.begin(), plan.lr.end(), dd_.h_lr.get());
  dd_.h_step[0] = int(plan.first_step);
  const cudaStream_t s = compute_.get();
  GPURUN_CUDA_CHECK(
      cudaMemcpyAsync(dd_.idx.get(), dd_.h_idx.get(), dd_.idx.bytes(), cudaMemcpyHostToDevice, s));
  GPURUN_CUDA_CHECK(cudaMemcpyAsync(dd_.lr_table.get(), dd_.h_lr.get(), dd_.lr_table.bytes(),
                                    cudaMemcpyHostToDevice, s));
  GPURUN_CUDA_CHECK(
      cudaMemcpyAsync(dd_.step.get(), dd_.h_step.get(), sizeof(int), cudaMemcpyHostToDevice, s));
  next_step_ = synced_ = plan.first_step;
  stop_requested_ = false;
}

void CudaBackend::step(std::int64_t step, bool stop_requested) {
  if (step != next_step_) {
    throw std::logic_error("CUDA backend: step " + std::to_string(step) +
                           " asked for, the device is at " + std::to_string(next_step_));
  }
  stop_requested_ = stop_requested_ || stop_requested;
  // Never launch onto an aborted communicator: the graph's NCCL node would run on freed memory.
  if (wd_) wd_->check();
  const bool split = exchange_ == cuda::AllreduceBackend::kHostMpi;
  auto t = Clock::now();
  if (info_.graph)
    g1_.launch(compute_.get());
  else
    enqueue_part1();
  host_seconds_ += seconds_since(t);
  if (split) host_allreduce();
  t = Clock::now();
  if (info_.graph && split) g2_.launch(compute_.get());
  if (!info_.graph) enqueue_part2();
  host_seconds_ += seconds_since(t);
  // The trainer syncs at least every sync_every() = loss_every steps: the slot is free.
  const std::size_t slot = std::size_t(next_step_ - synced_);
  if (slot >= step_done_.size())
    throw std::logic_error(
        "CUDA backend: more steps than the loss read-back interval between syncs");
  GPURUN_CUDA_CHECK(cudaEventRecord(step_done_[slot].get(), compute_.get()));
  ++next_step_;
}

// The step's timing marks (the last step's) stand for every step since the previous sync.
void CudaBackend::sample_breakdown(std::int64_t steps) {
  if (!opt_.breakdown || steps == 0) return;
  float a = 0, b = 0, c = 0;
  GPURUN_CUDA_CHECK(cudaEventElapsedTime(&a, t_[0].get(), t_[1].get()));
  GPURUN_CUDA_CHECK(cudaEventElapsedTime(&b, t_[1].get(), t_[2].get()));
  GPURUN_CUDA_CHECK(cudaEventElapsedTime(&c, t_[2].get(), t_[3].get()));
  kernel_est_ += 1e-3 * double(a + c) * double(steps);
  allreduce_est_ += 1e-3 * double(b) * double(steps);
}

Progress CudaBackend::sync(SyncAt) {
  const std::size_t from = std::size_t(synced_), to = std::size_t(next_step_);
  const cudaStream_t s = compute_.get();
  Progress p;
  p.steps = next_step_ - synced_;
  if (to > from) {
    GPURUN_CUDA_CHECK(cudaMemcpyAsync(dd_.h_loss_hist.get() + from, dd_.loss_hist.get() + from,
                                      (to - from) * sizeof(float), cudaMemcpyDeviceToHost, s));
    GPURUN_CUDA_CHECK(
        cudaMemcpyAsync(dd_.h_correct_hist.get() + from, dd_.correct_hist.get() + from,
                        (to - from) * sizeof(std::int64_t), cudaMemcpyDeviceToHost, s));
  }
  GPURUN_CUDA_CHECK(cudaEventRecord(ev_read_.get(), s));
  for (std::int64_t i = 0; i < p.steps; ++i) {
    const std::string what = "training step " + std::to_string(synced_ + i);
    cuda::wait_event(step_done_[std::size_t(i)].get(), wd_.get(), what.c_str());
  }
  cuda::wait_event(ev_read_.get(), wd_.get(), "the losses' read-back");
  sample_breakdown(p.steps);
  // Ranks agree on the sums and on stopping in one collective.
  double sums[3] = {0, 0, stop_requested_ ? 1.0 : 0.0};
  for (std::size_t t = from; t < to; ++t) {
    sums[0] += dd_.h_loss_hist[t];
    sums[1] += double(dd_.h_correct_hist[t]);
    p.rank_losses.push_back(double(dd_.h_loss_hist[t]) / batch_);
  }
  bounded_sum(sums, 3, "the losses and the stop vote");
  p.loss_sum = sums[0];
  p.correct = sums[1];
  p.stop = sums[2] > 0;
  synced_ = next_step_;
  return p;
}

Evaluation CudaBackend::evaluate(int eval_batch) {
  if (eval_batch < 1 || eval_batch > dm_.max_batch()) {
    throw std::invalid_argument("evaluation batch " + std::to_string(eval_batch) + " outside 1.." +
                                std::to_string(dm_.max_batch()) +
                                " (the activations were sized for the larger of the training "
                                "and evaluation batches)");
  }
  if (wd_) wd_->check();
  const std::size_t count = dd_.eval_count;
  const std::size_t nb = (count + std::size_t(eval_batch) - 1) / std::size_t(eval_batch);
  const cudaStream_t s = compute_.get();
  const k::Stream S{s};
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t off = b * std::size_t(eval_batch);
    const int n = int(std::min<std::size_t>(std::size_t(eval_batch), count - off));
    cuda::gather_batch(dd_.test_px.get(), dd_.test_lb.get(), dd_.img, dd_.eval_idx.get() + off,
                       nullptr, n, nullptr, nullptr, dm_.input(), dm_.labels(), S);
    dm_.forward_loss(n, 0.0f, S);
    GPURUN_CUDA_CHECK(cudaMemcpyAsync(dd_.h_eval_loss.get() + b, dm_.loss(), sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
    GPURUN_CUDA_CHECK(cudaMemcpyAsync(dd_.h_eval_correct.get() + b, dm_.correct(),
                                      sizeof(std::int64_t), cudaMemcpyDeviceToHost, s));
  }
  GPURUN_CUDA_CHECK(cudaEventRecord(ev_read_.get(), s));
  cuda::wait_event(ev_read_.get(), wd_.get(), "evaluation");
  double sums[3] = {0, 0, double(count)};
  for (std::size_t b = 0; b < nb; ++b) {
    sums[0] += dd_.h_eval_loss[b];
    sums[1] += double(dd_.h_eval_correct[b]);
  }
  bounded_sum(sums, 3, "the evaluation's sums");
  return {sums[0] / sums[2], sums[1] / sums[2]};
}

BackendTimes CudaBackend::times() const {
  if (wd_) wd_->check();
  BackendTimes t;
  t.exchange = exchange_ == cuda::AllreduceBackend::kHostMpi ? mpi_seconds_ : allreduce_est_;
  t.kernels = kernel_est_;
  t.host = host_seconds_;
  return t;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(ProcessGroup& pg, const ModelSpec& model,
                                           const Dataset& data, const BackendConfig& cfg,
                                           const CudaOptions& options, std::ostream& log) {
  return std::make_unique<CudaBackend>(pg, model, data, cfg, options, log);
}

}  // namespace gpurun::runtime

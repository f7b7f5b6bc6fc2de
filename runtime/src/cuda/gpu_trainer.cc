// gpu_trainer.cc: the device-resident data-parallel training loop (gpu_trainer.h). Per step, one
// CUDA Graph replay: gather the batch from the resident dataset (the step counter lives on the
// device), forward, loss, backward into the flat gradient buffer, ONE allreduce on its own stream
// (ordered by events), SGD with 1/world and the scheduled learning rate read on the device, and
// the step counter advance. The host only launches; it reads losses every loss_every steps.
// Run: mnist_cnn --device cuda (examples/mnist_cnn); tests: ctest -L gpu.
#include "gpurun/runtime/gpu_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>

#include "cuda/check.cuh"
#include "device.h"
#include "gpurun/common/posix.h"
#include "gpurun/kernels/accuracy.h"
#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/dense.h"
#include "gpurun/kernels/device_probe.h"
#include "gpurun/kernels/sgd.h"
#include "gpurun/kernels/softmax_xent.h"
#include "gpurun/runtime/checkpoint.h"
#include "gpurun/runtime/model.h"
#include "gpurun/runtime/sampler.h"
#include "gpurun/runtime/stop_signal.h"
#include "nccl_comm.h"
#include "step_kernels.h"

namespace gpurun::runtime {

bool cuda_available() noexcept {
  return kernels::cuda_device_count() > 0;
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

namespace {

namespace k = gpurun::kernels;
namespace kc = gpurun::kernels::cuda;
using cuda::DeviceBuffer;
using cuda::Event;
using cuda::EventTiming;
using cuda::GraphExec;
using cuda::PinnedBuffer;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::uint64_t fnv1a(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

std::size_t aligned(std::size_t n) {
  return (n + kParamAlign - 1) / kParamAlign * kParamAlign;
}

// Offsets of each tensor in the flat buffers: the same layout as the CPU Model (layers.cc binds
// weights first, then the bias, each padded to kParamAlign floats), checked against it.
struct Layout {
  int in_h = 0, in_w = 0, conv_c = 0, k = 0, hidden = 0, classes = 0;
  std::size_t conv_out = 0;  // conv_c * out_h * out_w
  std::size_t w1 = 0, b1 = 0, w2 = 0, b2 = 0, w3 = 0, b3 = 0, n = 0;
};

Layout layout_of(const Model& m) {
  const auto& ls = m.layers();
  if (ls.size() != 3 || ls[0]->name() != "conv2d" || ls[1]->name() != "dense" ||
      ls[2]->name() != "dense" || ls[0]->input_shape().c != 1) {
    throw std::invalid_argument("GPU trainer: expects the MNIST CNN (conv2d, dense, dense)");
  }
  Layout L;
  const Shape in = ls[0]->input_shape(), co = ls[0]->output_shape();
  L.in_h = in.h, L.in_w = in.w, L.conv_c = co.c, L.k = in.h - co.h + 1;
  L.conv_out = co.size();
  L.hidden = int(ls[1]->output_shape().size());
  L.classes = int(ls[2]->output_shape().size());
  L.w1 = 0;
  L.b1 = aligned(std::size_t(L.conv_c) * L.k * L.k);
  L.w2 = L.b1 + aligned(std::size_t(L.conv_c));
  L.b2 = L.w2 + aligned(std::size_t(L.hidden) * L.conv_out);
  L.w3 = L.b2 + aligned(std::size_t(L.hidden));
  L.b3 = L.w3 + aligned(std::size_t(L.classes) * L.hidden);
  L.n = L.b3 + aligned(std::size_t(L.classes));
  if (L.n != m.param_floats()) {
    throw std::logic_error("GPU trainer: parameter layout (" + std::to_string(L.n) +
                           " floats) differs from the CPU model's (" +
                           std::to_string(m.param_floats()) + ")");
  }
  return L;
}

int pick_device(ProcessGroup& pg, std::ostream& log) {
  // cudaGetDeviceCount, not the probe: the probe launches on device 0, which would put a context
  // (hundreds of MB) of every rank on the node's first GPU.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (count == 0) {
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    throw std::runtime_error("no usable CUDA device on " + cuda::rank_label(pg.rank()) +
                             " (CUDA_VISIBLE_DEVICES=" + (vis ? vis : "<unset>") +
                             "); use --device cpu or --device auto");
  }
  // gpurun gives each rank exactly its GPU(s) in CUDA_VISIBLE_DEVICES, so device 0 is ours. With
  // several visible (bare mpirun), ranks on a node take them in local-rank order.
  int dev = 0;
  if (count > 1) {
    dev = pg.local_rank() % count;
    if (pg.local_size() > count && pg.rank() == 0) {
      log << "note: " << pg.local_size() << " ranks share " << count << " visible GPUs\n";
    }
  }
  GPURUN_CUDA_CHECK(cudaSetDevice(dev));
  return dev;
}

// Everything on the device, and how to enqueue a step.
class GpuState {
 public:
  GpuState(const Layout& L, int batch, int eval_batch, int world, const Dataset& data,
           std::size_t steps_per_epoch, bool momentum)
      : L_(L),
        B_(batch),
        maxB_(std::max(batch, eval_batch)),
        world_(world),
        img_(data.train.image_floats()),
        train_px_(data.train.pixels.size()),
        train_lb_(data.train.count),
        test_px_(data.test.pixels.size()),
        test_lb_(data.test.count),
        idx_(steps_per_epoch * std::size_t(batch)),
        lr_table_(steps_per_epoch),
        step_(1),
        params_(L.n),
        grads_(L.n),
        vel_(momentum ? L.n : 0),
        x_(std::size_t(maxB_) * img_),
        y_(std::size_t(maxB_)),
        a1_(std::size_t(maxB_) * L.conv_out),
        da1_(std::size_t(maxB_) * L.conv_out),
        a2_(std::size_t(maxB_) * L.hidden),
        da2_(std::size_t(maxB_) * L.hidden),
        logits_(std::size_t(maxB_) * L.classes),
        dlogits_(std::size_t(maxB_) * L.classes),
        lr_cur_(1),
        loss_(1),
        correct_(1),
        loss_hist_(steps_per_epoch),
        correct_hist_(steps_per_epoch),
        h_idx_(steps_per_epoch * std::size_t(batch)),
        h_lr_(steps_per_epoch),
        h_step_(1),
        h_loss_hist_(steps_per_epoch),
        h_correct_hist_(steps_per_epoch),
        t_(4) {
    for (auto& e : t_) e = Event(EventTiming::kOn);
    // The dataset goes up once; 47 MB for MNIST's training split.
    GPURUN_CUDA_CHECK(cudaMemcpy(train_px_.get(), data.train.pixels.data(), train_px_.bytes(),
                                 cudaMemcpyHostToDevice));
    GPURUN_CUDA_CHECK(cudaMemcpy(train_lb_.get(), data.train.labels.data(), train_lb_.bytes(),
                                 cudaMemcpyHostToDevice));
    GPURUN_CUDA_CHECK(cudaMemcpy(test_px_.get(), data.test.pixels.data(), test_px_.bytes(),
                                 cudaMemcpyHostToDevice));
    GPURUN_CUDA_CHECK(cudaMemcpy(test_lb_.get(), data.test.labels.data(), test_lb_.bytes(),
                                 cudaMemcpyHostToDevice));
    // Algorithms are benchmarked now, outside any capture; the workspace fits the largest.
    std::size_t ws = std::max(kc::conv2d_workspace_floats(conv(B_)),
                              kc::conv2d_workspace_floats(conv(eval_batch)));
    ws_ = DeviceBuffer<float>(std::max<std::size_t>(ws, 1));
    // Pageable cudaMemcpy may return before its DMA lands, and the trainer's streams are
    // non-blocking (they do not wait for the legacy stream): settle everything now.
    GPURUN_CUDA_CHECK(cudaDeviceSynchronize());
  }

  k::Conv2dDesc conv(int b) const {
    k::Conv2dDesc d;
    d.batch = b, d.in_c = 1, d.in_h = L_.in_h, d.in_w = L_.in_w, d.out_c = L_.conv_c;
    d.k_h = d.k_w = L_.k;
    return d;
  }
  float* p(std::size_t off) const { return params_.get() + off; }
  float* g(std::size_t off) const { return grads_.get() + off; }
  k::Workspace ws() const { return {ws_.get(), ws_.size()}; }

  // Gather (by the device step counter) + forward + loss + backward: the gradient buffer holds
  // d(mean loss)/dparams of this rank's batch afterwards, as Model::forward_backward's does.
  void enqueue_forward_backward(cudaStream_t s) const {
    const k::Stream S{s};
    cuda::gather_batch(train_px_.get(), train_lb_.get(), img_, idx_.get(), step_.get(), B_,
                       lr_table_.get(), lr_cur_.get(), x_.get(), y_.get(), S);
    enqueue_forward(B_, S);
    kc::accuracy_count({B_, L_.classes}, logits_.get(), y_.get(), correct_.get(), S);
    kc::softmax_xent({B_, L_.classes, 1.0f / float(B_)}, logits_.get(), y_.get(), dlogits_.get(),
                     loss_.get(), S);
    const auto over = k::Accumulate::kOverwrite;
    const int flat = int(L_.conv_out);
    kc::bias_act_backward({B_, L_.classes, 1, k::Activation::kNone}, logits_.get(), dlogits_.get(),
                          g(L_.b3), over, S);
    kc::dense_backward_weights({B_, L_.hidden, L_.classes}, a2_.get(), dlogits_.get(), g(L_.w3),
                               over, S);
    kc::dense_backward_data({B_, L_.hidden, L_.classes}, p(L_.w3), dlogits_.get(), da2_.get(), S);
    kc::bias_act_backward({B_, L_.hidden, 1, k::Activation::kRelu}, a2_.get(), da2_.get(), g(L_.b2),
                          over, S);
    kc::dense_backward_weights({B_, flat, L_.hidden}, a1_.get(), da2_.get(), g(L_.w2), over, S);
    kc::dense_backward_data({B_, flat, L_.hidden}, p(L_.w2), da2_.get(), da1_.get(), S);
    const int hw = flat / L_.conv_c;
    kc::bias_act_backward({B_, L_.conv_c, hw, k::Activation::kRelu}, a1_.get(), da1_.get(),
                          g(L_.b1), over, S);
    // The first layer's input gradient is never needed: no backward-data convolution.
    kc::conv2d_backward_weights(conv(B_), x_.get(), da1_.get(), g(L_.w1), ws(), over, S);
  }

  void enqueue_forward(int b, k::Stream S) const {
    const int flat = int(L_.conv_out), hw = flat / L_.conv_c;
    kc::conv2d_forward(conv(b), x_.get(), p(L_.w1), a1_.get(), ws(), S);
    kc::bias_act_forward({b, L_.conv_c, hw, k::Activation::kRelu}, a1_.get(), p(L_.b1), S);
    kc::dense_forward({b, flat, L_.hidden}, a1_.get(), p(L_.w2), a2_.get(), S);
    kc::bias_act_forward({b, L_.hidden, 1, k::Activation::kRelu}, a2_.get(), p(L_.b2), S);
    kc::dense_forward({b, L_.hidden, L_.classes}, a2_.get(), p(L_.w3), logits_.get(), S);
    kc::bias_act_forward({b, L_.classes, 1, k::Activation::kNone}, logits_.get(), p(L_.b3), S);
  }

  // SGD (1/world folded in, learning rate from the device) + step counter advance.
  void enqueue_update(const TrainConfig& cfg, cudaStream_t s) const {
    k::SgdDesc sd;
    sd.n = L_.n;
    sd.momentum = cfg.momentum;
    sd.weight_decay = cfg.weight_decay;
    sd.grad_scale = 1.0f / float(world_);
    kc::sgd_step_device_lr(sd, lr_cur_.get(), params_.get(), grads_.get(),
                           vel_.size() ? vel_.get() : nullptr, k::Stream{s});
    cuda::advance_step(step_.get(), loss_.get(), correct_.get(), loss_hist_.get(),
                       correct_hist_.get(), k::Stream{s});
  }

  const Layout& L_;
  int B_, maxB_, world_;
  std::size_t img_;
  DeviceBuffer<std::uint8_t> train_px_;
  DeviceBuffer<std::int32_t> train_lb_;
  DeviceBuffer<std::uint8_t> test_px_;
  DeviceBuffer<std::int32_t> test_lb_;
  DeviceBuffer<std::int32_t> idx_;
  DeviceBuffer<float> lr_table_;
  DeviceBuffer<int> step_;
  DeviceBuffer<float> params_, grads_, vel_;
  DeviceBuffer<float> x_;
  DeviceBuffer<std::int32_t> y_;
  DeviceBuffer<float> a1_, da1_, a2_, da2_, logits_, dlogits_;
  DeviceBuffer<float> lr_cur_, loss_;
  DeviceBuffer<std::int64_t> correct_;
  DeviceBuffer<float> loss_hist_;
  DeviceBuffer<std::int64_t> correct_hist_;
  DeviceBuffer<float> ws_;
  PinnedBuffer<std::int32_t> h_idx_;
  PinnedBuffer<float> h_lr_;
  PinnedBuffer<int> h_step_;
  PinnedBuffer<float> h_loss_hist_;
  PinnedBuffer<std::int64_t> h_correct_hist_;
  std::vector<Event> t_;  // timing marks of one step: start, after backward, after allreduce, end
};

struct EvalResult {
  double loss = 0, accuracy = 0;
};

EvalResult evaluate(ProcessGroup& pg, GpuState& st, const Split& test, int eval_batch,
                    cudaStream_t s, cuda::Watchdog* wd) {
  const std::vector<std::int32_t> shard = eval_shard(test.count, pg.size(), pg.rank());
  const std::size_t nb = (shard.size() + std::size_t(eval_batch) - 1) / std::size_t(eval_batch);
  DeviceBuffer<std::int32_t> idx(std::max<std::size_t>(shard.size(), 1));
  DeviceBuffer<float> loss(std::max<std::size_t>(nb, 1));
  DeviceBuffer<std::int64_t> correct(std::max<std::size_t>(nb, 1));
  PinnedBuffer<float> h_loss(std::max<std::size_t>(nb, 1));
  PinnedBuffer<std::int64_t> h_correct(std::max<std::size_t>(nb, 1));
  if (!shard.empty()) {
    GPURUN_CUDA_CHECK(cudaMemcpyAsync(idx.get(), shard.data(), shard.size() * sizeof(std::int32_t),
                                      cudaMemcpyHostToDevice, s));
  }
  const k::Stream S{s};
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t off = b * std::size_t(eval_batch);
    const int n = int(std::min<std::size_t>(eval_batch, shard.size() - off));
    cuda::gather_batch(st.test_px_.get(), st.test_lb_.get(), st.img_, idx.get() + off, nullptr, n,
                       nullptr, nullptr, st.x_.get(), st.y_.get(), S);
    st.enqueue_forward(n, S);
    kc::accuracy_count({n, st.L_.classes}, st.logits_.get(), st.y_.get(), correct.get() + b, S);
    kc::softmax_xent({n, st.L_.classes, 1.0f}, st.logits_.get(), st.y_.get(), st.dlogits_.get(),
                     loss.get() + b, S);
  }
  GPURUN_CUDA_CHECK(
      cudaMemcpyAsync(h_loss.get(), loss.get(), nb * sizeof(float), cudaMemcpyDeviceToHost, s));
  GPURUN_CUDA_CHECK(cudaMemcpyAsync(h_correct.get(), correct.get(), nb * sizeof(std::int64_t),
                                    cudaMemcpyDeviceToHost, s));
  Event done;
  GPURUN_CUDA_CHECK(cudaEventRecord(done.get(), s));
  cuda::wait_event(done.get(), wd, "evaluation");
  double sums[3] = {0, 0, double(shard.size())};
  for (std::size_t b = 0; b < nb; ++b) {
    sums[0] += h_loss[b];
    sums[1] += double(h_correct[b]);
  }
  pg.allreduce_sum(sums, 3);
  return {sums[0] / sums[2], sums[1] / sums[2]};
}

// What this process loaded, not what it was compiled against: the device may carry other minor
// versions of the libraries than the build machine.
std::string library_versions() {
  int driver = 0, runtime = 0, nccl = 0, cublas = 0;
  GPURUN_CUDA_CHECK(cudaDriverGetVersion(&driver));
  GPURUN_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  GPURUN_NCCL_CHECK(ncclGetVersion(&nccl));
  GPURUN_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &cublas));
  int cublas_minor = 0, cublas_patch = 0;
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

}  // namespace

GpuTrainResult train_gpu(ProcessGroup& pg, const Dataset& data, const TrainConfig& cfg,
                         const GpuOptions& opt, std::ostream& log) {
  if (cfg.epochs < 1) throw std::invalid_argument("epochs must be >= 1");
  if (cfg.batch_per_rank < 1) throw std::invalid_argument("batch size must be >= 1");
  if (cfg.eval_batch < 1) throw std::invalid_argument("eval batch must be >= 1");
  if (opt.loss_every < 1) throw std::invalid_argument("--loss-every must be >= 1");
  if (!(opt.comm_timeout_s > 0)) throw std::invalid_argument("--comm-timeout must be > 0");
  if (cfg.resume && cfg.checkpoint_dir.empty()) {
    throw std::invalid_argument("--resume needs --checkpoint DIR");
  }
  const auto t_start = Clock::now();
  const int world = pg.size(), rank = pg.rank();
  const int B = cfg.batch_per_rank;
  GpuTrainResult out;
  TrainResult& res = out.train;

  const int dev = pick_device(pg, log);
  out.device = "cuda:" + device_name(dev);
  out.versions = library_versions();
  log << "versions: " << out.versions << "\n";
  kc::set_math_precision(opt.math == GpuMath::kTf32 ? kc::MathPrecision::kTf32
                                                    : kc::MathPrecision::kFp32);
  if (cfg.micro_batch > 0) {
    log << "note: --micro-batch is a CPU memory saver; the GPU runs the whole batch at once\n";
  }

  // Initial weights exactly as the CPU trainer makes them: the CPU model's init, rank 0's copy.
  const Split& train_set = data.train;
  auto model = make_mnist_cnn(Shape{1, train_set.rows, train_set.cols}, data.classes, 1);
  const Layout L = layout_of(*model);
  model->init(cfg.seed);
  pg.broadcast(model->params(), L.n * sizeof(float), 0);

  DistributedSampler sampler(train_set.count, world, rank, B, cfg.seed);
  const std::int64_t spe = std::int64_t(sampler.steps_per_epoch());
  res.param_count = model->param_count();
  res.steps_per_epoch = spe;
  res.lr_peak = learning_rate(cfg, world, std::int64_t(1) << 60, spe);

  // Allreduce backend: decided identically on every rank.
  std::string why;
  const char* multi = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  out.backend = cuda::choose_backend(pg, dev, multi && std::string(multi) == "1", &why);
  if (!why.empty() && rank == 0) log << "note: " << why << "\n";

  GpuState st(L, B, cfg.eval_batch, world, data, std::size_t(spe), cfg.momentum != 0.0f);
  cuda::Stream compute, comm_stream;
  std::unique_ptr<cuda::NcclComm> comm;
  std::unique_ptr<cuda::Watchdog> wd;
  if (out.backend == AllreduceBackend::kNccl) {
    comm = std::make_unique<cuda::NcclComm>(pg, opt.comm_timeout_s);
    wd = std::make_unique<cuda::Watchdog>(*comm, opt.comm_timeout_s);
  }
  PinnedBuffer<float> h_grads(out.backend == AllreduceBackend::kHostMpi ? L.n : 0);
  const cudaStream_t s = compute.get();

  // Resume: rank 0 reads the checkpoint and broadcasts it, as the CPU trainer does.
  std::int64_t start_epoch = 0, start_step = 0, global_step = 0;
  double ep_loss = 0, ep_correct = 0, ep_seen = 0;
  std::vector<float> velocity_init;
  if (cfg.resume) {
    std::int32_t have = 0;
    Checkpoint ck;
    if (rank == 0 && checkpoint_exists(cfg.checkpoint_dir)) {
      ck = load_checkpoint(checkpoint_path(cfg.checkpoint_dir));
      if (ck.params.size() != L.n) {
        throw std::runtime_error(checkpoint_path(cfg.checkpoint_dir) + ": holds " +
                                 std::to_string(ck.params.size()) + " parameters, model has " +
                                 std::to_string(L.n));
      }
      have = 1;
    }
    pg.broadcast(&have, sizeof have, 0);
    if (have) {
      std::int64_t pos[3] = {ck.epoch, ck.step, ck.global_step};
      double sums[3] = {ck.epoch_loss_sum, ck.epoch_correct, ck.epoch_seen};
      pg.broadcast(pos, sizeof pos, 0);
      pg.broadcast(sums, sizeof sums, 0);
      if (rank == 0) std::memcpy(model->params(), ck.params.data(), L.n * sizeof(float));
      pg.broadcast(model->params(), L.n * sizeof(float), 0);
      std::int32_t has_vel = rank == 0 ? std::int32_t(ck.velocity.size() == L.n) : 0;
      pg.broadcast(&has_vel, sizeof has_vel, 0);
      if (cfg.momentum != 0.0f && has_vel) {
        velocity_init.resize(L.n);
        if (rank == 0) velocity_init = ck.velocity;
        pg.broadcast(velocity_init.data(), L.n * sizeof(float), 0);
      }
      start_epoch = pos[0], start_step = pos[1], global_step = pos[2];
      ep_loss = sums[0], ep_correct = sums[1], ep_seen = sums[2];
      res.resumed = true;
      res.resumed_epoch = start_epoch;
      res.resumed_step = start_step;
      log << "resumed from " << checkpoint_path(cfg.checkpoint_dir) << " at epoch "
          << start_epoch + 1 << ", step " << start_step << "\n";
    } else {
      log << "no checkpoint in " << cfg.checkpoint_dir << ": starting from scratch\n";
    }
  }
  GPURUN_CUDA_CHECK(
      cudaMemcpy(st.params_.get(), model->params(), L.n * sizeof(float), cudaMemcpyHostToDevice));
  if (!velocity_init.empty()) {
    GPURUN_CUDA_CHECK(cudaMemcpy(st.vel_.get(), velocity_init.data(), L.n * sizeof(float),
                                 cudaMemcpyHostToDevice));
  }
  GPURUN_CUDA_CHECK(cudaDeviceSynchronize());  // as in GpuState: pageable copies, legacy stream

  std::vector<float> host_params(L.n);
  auto download_params = [&] {
    GPURUN_CUDA_CHECK(cudaStreamSynchronize(s));
    GPURUN_CUDA_CHECK(cudaMemcpy(host_params.data(), st.params_.get(), L.n * sizeof(float),
                                 cudaMemcpyDeviceToHost));
  };
  auto make_checkpoint = [&](std::int64_t epoch, std::int64_t step) {
    if (cfg.checkpoint_dir.empty()) return;
    download_params();
    if (rank != 0) return;
    Checkpoint ck;
    ck.seed = cfg.seed;
    ck.world_size = world;
    ck.batch_per_rank = B;
    ck.epoch = epoch;
    ck.step = step;
    ck.global_step = global_step;
    ck.epoch_loss_sum = ep_loss;
    ck.epoch_correct = ep_correct;
    ck.epoch_seen = ep_seen;
    ck.params = host_params;
    if (st.vel_.size()) {
      ck.velocity.resize(L.n);
      GPURUN_CUDA_CHECK(cudaMemcpy(ck.velocity.data(), st.vel_.get(), L.n * sizeof(float),
                                   cudaMemcpyDeviceToHost));
    }
    save_checkpoint(cfg.checkpoint_dir, ck);
  };

  // --- the step, as one or two graphs -------------------------------------------------------
  Event ev_fb, ev_ar, ev_d2h;
  const bool timing = opt.breakdown;
  auto mark = [&](int i, cudaStream_t on) {
    // External records become event nodes when captured, so replays can be timed too.
    if (timing)
      GPURUN_CUDA_CHECK(cudaEventRecordWithFlags(st.t_[i].get(), on, cudaEventRecordExternal));
  };
  // Part 1: gather, forward, backward, and (NCCL) the allreduce forked onto its own stream.
  auto enqueue_part1 = [&] {
    mark(0, s);
    st.enqueue_forward_backward(s);
    mark(1, s);
    if (out.backend == AllreduceBackend::kNccl) {
      GPURUN_CUDA_CHECK(cudaEventRecord(ev_fb.get(), s));
      GPURUN_CUDA_CHECK(cudaStreamWaitEvent(comm_stream.get(), ev_fb.get(), 0));
      comm->allreduce_sum(st.grads_.get(), st.grads_.get(), L.n, comm_stream.get());
      GPURUN_CUDA_CHECK(cudaEventRecord(ev_ar.get(), comm_stream.get()));
      GPURUN_CUDA_CHECK(cudaStreamWaitEvent(s, ev_ar.get(), 0));
    } else if (out.backend == AllreduceBackend::kHostMpi) {
      GPURUN_CUDA_CHECK(cudaMemcpyAsync(h_grads.get(), st.grads_.get(), L.n * sizeof(float),
                                        cudaMemcpyDeviceToHost, s));
    }
  };
  // Part 2: (host MPI) the summed gradients back up, then SGD and the step counter.
  auto enqueue_part2 = [&] {
    if (out.backend == AllreduceBackend::kHostMpi) {
      GPURUN_CUDA_CHECK(cudaMemcpyAsync(st.grads_.get(), h_grads.get(), L.n * sizeof(float),
                                        cudaMemcpyHostToDevice, s));
    }
    mark(2, s);
    st.enqueue_update(cfg, s);
    mark(3, s);
  };
  const bool split = out.backend == AllreduceBackend::kHostMpi;
  double host_seconds = 0, mpi_seconds = 0;
  auto host_allreduce = [&] {
    const auto t = Clock::now();
    GPURUN_CUDA_CHECK(cudaEventRecord(ev_d2h.get(), s));
    cuda::wait_event(ev_d2h.get(), wd.get(), "gradient download");
    pg.allreduce_sum(h_grads.get(), L.n);
    mpi_seconds += since(t);
  };

  // Warm-up outside capture: loads modules, creates library handles, connects NCCL. It writes
  // only activations and gradients (the next step overwrites them); parameters are untouched.
  // The step counter, indices and learning rates are zero (valid) until the first epoch sets them.
  enqueue_part1();
  if (split) host_allreduce();
  {
    Event warm;  // waited for under the watchdog: this is the job's first collective
    GPURUN_CUDA_CHECK(cudaEventRecord(warm.get(), s));
    cuda::wait_event(warm.get(), wd.get(), "warm-up step (first allreduce)");
  }
  mpi_seconds = 0;

  GraphExec g1, g2;
  out.graph = opt.graph == GraphMode::kCapture;
  if (out.graph) {
    auto capture = [&](auto&& body) {
      GPURUN_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      try {
        body();
      } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(s, &broken);  // leave the stream usable for the error path
        if (broken) cudaGraphDestroy(broken);
        throw;
      }
      cudaGraph_t graph = nullptr;
      GPURUN_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      return GraphExec(graph);
    };
    if (split) {
      g1 = capture(enqueue_part1);
      g2 = capture(enqueue_part2);
    } else {
      g1 = capture([&] {
        enqueue_part1();
        enqueue_part2();
      });
    }
  }
  auto run_step = [&] {
    const auto t = Clock::now();
    if (out.graph) {
      g1.launch(s);
    } else {
      enqueue_part1();
    }
    host_seconds += since(t);
    if (split) host_allreduce();
    const auto t2 = Clock::now();
    if (out.graph) {
      if (split) g2.launch(s);
    } else {
      enqueue_part2();
    }
    host_seconds += since(t2);
  };

  StopSignalGuard signals;
  log << "training on " << out.device << ": " << world << " rank(s) x " << B << " images, " << spe
      << " steps/epoch, lr " << res.lr_peak << ", " << res.param_count << " parameters, "
      << (out.graph ? "CUDA Graph" : "eager") << ", allreduce " << to_string(out.backend)
      << (opt.math == GpuMath::kTf32 ? ", TF32" : ", FP32") << std::endl;

  double kernel_s = 0, allreduce_s = 0;
  for (std::int64_t epoch = start_epoch; epoch < cfg.epochs && res.stop == StopReason::kFinished;
       ++epoch) {
    sampler.set_epoch(epoch);
    const std::int64_t first = epoch == start_epoch ? start_step : 0;
    if (epoch != start_epoch) ep_loss = ep_correct = ep_seen = 0;
    // This rank's indices and learning rates for the whole epoch go up once.
    for (std::int64_t t = 0; t < spe; ++t) {
      sampler.step_indices(std::size_t(t), &st.h_idx_[std::size_t(t) * B]);
      st.h_lr_[std::size_t(t)] = learning_rate(cfg, world, global_step - first + t, spe);
    }
    st.h_step_[0] = int(first);
    const auto t_epoch = Clock::now();
    GPURUN_CUDA_CHECK(cudaMemcpyAsync(st.idx_.get(), st.h_idx_.get(), st.idx_.bytes(),
                                      cudaMemcpyHostToDevice, s));
    GPURUN_CUDA_CHECK(cudaMemcpyAsync(st.lr_table_.get(), st.h_lr_.get(), st.lr_table_.bytes(),
                                      cudaMemcpyHostToDevice, s));
    GPURUN_CUDA_CHECK(
        cudaMemcpyAsync(st.step_.get(), st.h_step_.get(), sizeof(int), cudaMemcpyHostToDevice, s));
    std::int64_t done = first, ep_images = 0;
    double samples = 0, k_sum = 0, ar_sum = 0;
    Event ev_read;
    auto read_back = [&] {
      GPURUN_CUDA_CHECK(cudaMemcpyAsync(st.h_loss_hist_.get(), st.loss_hist_.get(),
                                        st.loss_hist_.bytes(), cudaMemcpyDeviceToHost, s));
      GPURUN_CUDA_CHECK(cudaMemcpyAsync(st.h_correct_hist_.get(), st.correct_hist_.get(),
                                        st.correct_hist_.bytes(), cudaMemcpyDeviceToHost, s));
      GPURUN_CUDA_CHECK(cudaEventRecord(ev_read.get(), s));
      cuda::wait_event(ev_read.get(), wd.get(), "training steps");
      if (timing) {
        float a = 0, b = 0, c = 0;
        GPURUN_CUDA_CHECK(cudaEventElapsedTime(&a, st.t_[0].get(), st.t_[1].get()));
        GPURUN_CUDA_CHECK(cudaEventElapsedTime(&b, st.t_[1].get(), st.t_[2].get()));
        GPURUN_CUDA_CHECK(cudaEventElapsedTime(&c, st.t_[2].get(), st.t_[3].get()));
        k_sum += 1e-3 * (a + c);
        ar_sum += 1e-3 * b;
        samples += 1;
      }
    };
    for (std::int64_t step = first; step < spe; ++step) {
      if (cfg.max_steps >= 0 && global_step >= cfg.max_steps) {
        res.stop = StopReason::kMaxSteps;
        break;
      }
      run_step();
      ++global_step;
      ++done;
      ep_images += std::int64_t(B) * world;
      const bool last = step + 1 == spe;
      if ((step + 1) % opt.loss_every == 0 || last) {
        read_back();
        if (cfg.progress && rank == 0) {
          double l = 0;
          for (std::int64_t t = first; t < done; ++t) l += st.h_loss_hist_[std::size_t(t)];
          log << "\repoch " << epoch + 1 << " step " << done << "/" << spe << " loss "
              << l / double(std::max<std::int64_t>(1, (done - first) * B)) << std::flush;
        }
        // Ranks agree to stop at the same step: the signal flag is summed over the group.
        float stop = StopSignalGuard::received() != 0 ? 1.0f : 0.0f;
        if (world > 1) pg.allreduce_sum(&stop, 1);
        if (stop > 0.0f) {
          res.stop = StopReason::kSignal;
          res.signal = StopSignalGuard::received();
          if (res.signal == 0) res.signal = SIGTERM;  // another rank was signalled
          break;
        }
      }
    }
    read_back();  // everything this epoch did, including a partial tail
    const double ep_seconds = since(t_epoch);
    res.train_seconds += ep_seconds;
    res.images += ep_images;
    if (cfg.progress && rank == 0) log << "\r" << std::string(70, ' ') << "\r";
    double sums[2] = {0, 0};
    for (std::int64_t t = first; t < done; ++t) {
      sums[0] += st.h_loss_hist_[std::size_t(t)];
      sums[1] += double(st.h_correct_hist_[std::size_t(t)]);
      const std::int64_t gstep = global_step - done + t;
      if (gstep < opt.record_losses) {
        out.step_losses.push_back(double(st.h_loss_hist_[std::size_t(t)]) / B);
      }
    }
    pg.allreduce_sum(sums, 2);
    ep_loss += sums[0];
    ep_correct += sums[1];
    ep_seen += double(done - first) * B * world;
    if (samples > 0) {
      kernel_s += k_sum / samples * double(done - first);
      allreduce_s += ar_sum / samples * double(done - first);
    }
    if (res.stop == StopReason::kSignal) {
      make_checkpoint(epoch, done);
      break;
    }
    if (res.stop == StopReason::kMaxSteps) make_checkpoint(epoch, done);
    const EvalResult ev = evaluate(pg, st, data.test, cfg.eval_batch, s, wd.get());
    res.test_accuracy = ev.accuracy;
    res.test_loss = ev.loss;
    res.final_loss = ep_loss / std::max(1.0, ep_seen);
    res.train_accuracy = ep_correct / std::max(1.0, ep_seen);
    if (res.stop == StopReason::kMaxSteps) break;
    EpochStats es;
    es.epoch = int(epoch) + 1;
    es.loss = res.final_loss;
    es.train_accuracy = res.train_accuracy;
    es.test_loss = ev.loss;
    es.test_accuracy = ev.accuracy;
    es.seconds = ep_seconds;
    es.images_per_second = ep_seconds > 0 ? double(ep_images) / ep_seconds : 0;
    es.allreduce_share = 0;
    if (ep_seconds > 0 && samples > 0)
      es.allreduce_share = ar_sum / samples * double(done - first) / ep_seconds;
    if (ep_seconds > 0 && split) es.allreduce_share = std::min(1.0, mpi_seconds / ep_seconds);
    res.epochs.push_back(es);
    char line[256];
    std::snprintf(line, sizeof line,
                  "epoch %d/%d  loss %.4f  train_acc %.2f%%  test_acc %.2f%%  %.3fs  %.0f img/s",
                  es.epoch, cfg.epochs, es.loss, 100 * es.train_accuracy, 100 * es.test_accuracy,
                  es.seconds, es.images_per_second);
    log << line << std::endl;
    make_checkpoint(epoch + 1, 0);
  }
  if (res.stop == StopReason::kSignal) {
    log << "received " << common::signal_name(res.signal)
        << ": stopped at a step boundary (global step " << global_step << ")";
    if (!cfg.checkpoint_dir.empty()) {
      log << ", checkpoint written to " << checkpoint_path(cfg.checkpoint_dir)
          << "; continue with --resume";
    }
    log << std::endl;
  }
  if (wd) wd->check();
  download_params();
  res.global_steps = global_step;
  res.param_checksum = fnv1a(host_params.data(), L.n * sizeof(float));
  if (split) allreduce_s = mpi_seconds;
  res.allreduce_seconds = allreduce_s;
  res.compute_seconds = timing ? kernel_s : res.train_seconds - allreduce_s;
  out.kernel_seconds = timing ? kernel_s : 0;
  out.allreduce_seconds = timing || split ? allreduce_s : 0;
  out.host_seconds = host_seconds;
  res.seconds_total = since(t_start);
  return out;
}

}  // namespace gpurun::runtime

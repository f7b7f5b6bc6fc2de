// cpu_backend.cc: the CPU backend (backend.h). Each rank runs T replicas of the Model (--threads)
// on slices of its batch in a WorkerPool, adds the replicas' gradients in worker order, and hands
// the sum to its exchange (allreduce or shared memory), which combines the ranks and steps the
// parameters. The step's stats (loss, correct count, stop flag) ride in the gradient buffer's stat
// slots, so the ranks agree on them in the same exchange: a sync costs nothing.
// With local SGD (--local-sgd H) the exchange combines only the rank's own replicas, over a
// one-rank group of its own; the ranks meet at each sync, every H steps (model_average.h).
#include <algorithm>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>

#include "backend/backends.h"
#include "cpu/model_average.h"
#include "data/sampler.h"
#include "exchange.h"
#include "gpurun/kernels/cpu_kernels.h"
#include "gpurun/kernels/threads.h"

namespace gpurun::runtime {
namespace {

// --threads T: T replicas each train on batch/T images with single-threaded BLAS (the same partial
// sums as T ranks, added in a fixed order); when T does not divide the batch, one replica and T
// BLAS threads instead.
int workers_for(const CpuOptions& o, int batch) {
  return o.threads > 1 && batch % o.threads == 0 ? o.threads : 1;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(ProcessGroup& pg, const ModelSpec& model, const Dataset& data,
             const BackendConfig& cfg, const CpuOptions& opt, std::ostream& log)
      : pg_(pg),
        data_(data),
        batch_(cfg.batch_per_rank),
        micro_(opt.micro_batch),
        workers_(workers_for(opt, cfg.batch_per_rank)),
        slice_(batch_ / workers_),
        pool_(workers_),
        x_(std::size_t(batch_) * data.train.image_floats()),
        y_(std::size_t(batch_)) {
    check(opt);
    kernels::cpu::set_cpu_kernels(opt.kernels);
    kernels::cpu::set_num_threads(workers_ > 1 ? 1 : std::max(1, opt.threads));
    for (int w = 0; w < workers_; ++w) {
      models_.push_back(std::make_unique<Model>(model, std::max(slice_, cfg.eval_batch)));
    }
    cpu::ExchangeSetup setup;
    setup.requested = opt.exchange;
    setup.micro_batch = opt.micro_batch;
    setup.slice = slice_;
    setup.momentum = cfg.momentum;
    setup.weight_decay = cfg.weight_decay;
    setup.split = opt.split;
    setup.timeout_s = opt.comm_timeout_s;
    setup.powersgd_rank = opt.powersgd_rank;
    setup.powersgd_alternate = opt.powersgd_alternate;
    setup.bucket_floats = opt.bucket_floats;
    if (opt.local_sgd > 0) {
      alone_ = make_single_process_group();
      average_.emplace(pg, opt.local_sgd, models_[0]->param_floats(), opt.local_sgd_bf16,
                       opt.local_sgd_overlap);
    }
    exchange_ = cpu::make_exchange(alone_ ? *alone_ : pg, models_, setup, log);
  }

  BackendInfo info() const override {
    BackendInfo i;
    i.device = "cpu";
    i.versions = kernels::cpu::cpu_kernels_info();
    i.exchange = exchange_->name();
    i.summary = exchange_->summary();
    i.workers = workers_;
    i.fused_update = exchange_->fused();
    i.exchange_bytes_per_step = pg_.size() > 1 ? exchange_->bytes_per_step() : 0;
    i.wire_bytes_per_step = exchange_->wire_bytes_per_step();
    i.compression = exchange_->compression();
    if (average_) average_->describe(i);
    return i;
  }

  void set_state(const float* params, const float* velocity) override;

  void get_state(std::vector<float>* params, std::vector<float>* velocity) override {
    const Model& m = *models_[0];
    params->assign(m.params(), m.params() + m.param_floats());
    const float* v = exchange_->velocity();
    if (v)
      velocity->assign(v, v + m.param_floats());
    else
      velocity->clear();
  }

  void begin_epoch(const EpochPlan& plan) override { plan_ = plan; }
  void step(std::int64_t step, bool stop_requested) override;
  int sync_every() const override { return average_ ? average_->every() : 1; }
  Progress sync(SyncAt at) override;
  Evaluation evaluate(int eval_batch) override;
  Progress land_epoch_end() override;
  Evaluation evaluate_epoch_end(int eval_batch) override;
  BackendTimes times() const override {
    return {exchange_->seconds() + (average_ ? average_->seconds() : 0.0), 0, 0};
  }
  std::string epoch_note() const override { return exchange_->note(); }

 private:
  void check(const CpuOptions& opt) const;
  void add_worker_gradients();

  ProcessGroup& pg_;
  const Dataset& data_;
  const int batch_, micro_, workers_, slice_;
  WorkerPool pool_;
  std::vector<std::unique_ptr<Model>> models_;
  std::unique_ptr<ProcessGroup> alone_;  // local SGD: the one-rank group the exchange combines
  std::optional<cpu::ModelAverage> average_;  // local SGD: where the ranks meet
  std::unique_ptr<cpu::CpuExchange> exchange_;
  FloatBuffer x_;
  std::vector<std::int32_t> y_;
  EpochPlan plan_;
  Progress pending_;
};

// (Whether the model fits the data, make_backend checked for every backend.)
void CpuBackend::check(const CpuOptions& opt) const {
  if (opt.micro_batch < 0 || (opt.micro_batch > 0 && batch_ % opt.micro_batch != 0)) {
    throw std::invalid_argument("CPU options: micro_batch " + std::to_string(opt.micro_batch) +
                                " must divide the batch per rank, " + std::to_string(batch_));
  }
  if (opt.micro_batch > 0 && slice_ % opt.micro_batch != 0) {
    throw std::invalid_argument("CPU options: micro_batch " + std::to_string(opt.micro_batch) +
                                " must divide each thread's " + std::to_string(slice_) + " images");
  }
}

// With local SGD every rank is rank 0 of its own exchange: rank 0's state reaches the others here.
void CpuBackend::set_state(const float* params, const float* velocity) {
  if (!average_) return exchange_->set_state(params, velocity);
  const std::size_t n = models_[0]->param_floats();
  std::vector<float> p(n), v;
  int has_velocity = velocity != nullptr;  // rank 0's say
  if (pg_.rank() == 0) std::copy(params, params + n, p.begin());
  pg_.broadcast(p.data(), n * sizeof(float), 0);
  pg_.broadcast(&has_velocity, sizeof has_velocity, 0);
  if (has_velocity) {
    v.resize(n);
    if (pg_.rank() == 0) std::copy(velocity, velocity + n, v.begin());
    pg_.broadcast(v.data(), n * sizeof(float), 0);
  }
  exchange_->set_state(p.data(), has_velocity ? v.data() : nullptr);
  average_->reset(p.data());
}

Progress CpuBackend::sync(SyncAt at) {
  Progress p = std::exchange(pending_, Progress{});
  if (average_) average_->average(models_[0]->params(), p, at);
  return p;
}

Progress CpuBackend::land_epoch_end() {
  if (!average_) return Backend::land_epoch_end();
  return average_->land(models_[0]->params());
}

// The epoch's average swapped in for the evaluation (every replica shares models_[0]'s
// parameters), and out again after it.
Evaluation CpuBackend::evaluate_epoch_end(int eval_batch) {
  if (!average_) return Backend::evaluate_epoch_end(eval_batch);
  float* params = models_[0]->params();
  average_->swap_with_average(params);
  try {
    const Evaluation e = evaluate(eval_batch);
    average_->swap_with_average(params);
    return e;
  } catch (...) {
    average_->swap_with_average(params);
    throw;
  }
}

void CpuBackend::step(std::int64_t step, bool stop_requested) {
  const std::int32_t* idx = plan_.indices.data() + std::size_t(step) * batch_;
  const float lr = plan_.lr[std::size_t(step)];
  const std::size_t img = data_.train.image_floats();
  std::vector<double> loss(std::size_t(workers_), 0.0);
  pool_.run([&](int w) {
    float* xw = x_.data() + std::size_t(w) * slice_ * img;
    std::int32_t* yw = y_.data() + std::size_t(w) * slice_;
    data_.train.gather(idx + std::size_t(w) * slice_, slice_, xw, yw);
    const StepResult r =
        exchange_->deferred()
            ? models_[w]->forward_backward_deferred(slice_, xw, yw, exchange_->peers(w, lr))
            : models_[w]->forward_backward(slice_, xw, yw, micro_, exchange_->ready_hook());
    loss[std::size_t(w)] = r.loss_sum;
  });
  add_worker_gradients();
  float* stats = models_[0]->stats();
  stats[kStopFlag] = stop_requested ? 1.0f : 0.0f;
  exchange_->combine_and_update(lr, pool_);
  double mine = 0;
  for (double l : loss) mine += l;
  pending_.steps += 1;
  pending_.loss_sum += stats[kLossSum];
  pending_.correct += stats[kCorrect];
  pending_.stop = pending_.stop || stats[kStopFlag] > 0.0f;
  pending_.rank_losses.push_back(mine / batch_);
  if (average_) average_->progress();
}

// grads_0 += grads_1 + ... in worker order (the order micro-batch accumulation uses), each worker
// summing its own part of every range the exchange sums, stat slots included.
void CpuBackend::add_worker_gradients() {
  if (workers_ == 1) return;
  float* grads = models_[0]->grads();
  pool_.run([&](int w) {
    for (const Layer::Range& r : exchange_->summed()) {
      std::size_t lo, hi;
      share(r.end - r.begin, workers_, w, lo, hi);
      for (int v = 1; v < workers_; ++v) {
        const float* g = models_[std::size_t(v)]->grads();
        for (std::size_t i = r.begin + lo; i < r.begin + hi; ++i) grads[i] += g[i];
      }
    }
  });
}

// Each worker evaluates every W-th chunk of this rank's shard; partial sums are added in worker
// order, then across ranks.
Evaluation CpuBackend::evaluate(int eval_batch) {
  const Split& test = data_.test;
  const std::vector<std::int32_t> shard = eval_shard(test.count, pg_.size(), pg_.rank());
  std::vector<double> part(2 * std::size_t(workers_), 0.0);
  pool_.run([&](int w) {
    FloatBuffer x(std::size_t(eval_batch) * test.image_floats());
    std::vector<std::int32_t> y(static_cast<std::size_t>(eval_batch));
    std::size_t chunk = 0;
    for (std::size_t off = 0; off < shard.size(); off += std::size_t(eval_batch), ++chunk) {
      if (int(chunk % std::size_t(workers_)) != w) continue;
      const int n = int(std::min<std::size_t>(std::size_t(eval_batch), shard.size() - off));
      test.gather(shard.data() + off, n, x.data(), y.data());
      const StepResult r = models_[std::size_t(w)]->evaluate(n, x.data(), y.data());
      part[2 * std::size_t(w)] += r.loss_sum;
      part[2 * std::size_t(w) + 1] += double(r.correct);
    }
  });
  double sums[3] = {0, 0, double(shard.size())};  // loss, correct, count
  for (int w = 0; w < workers_; ++w) {
    sums[0] += part[2 * std::size_t(w)];
    sums[1] += part[2 * std::size_t(w) + 1];
  }
  pg_.allreduce_sum(sums, 3);
  return {sums[0] / sums[2], sums[1] / sums[2]};
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(ProcessGroup& pg, const ModelSpec& model,
                                          const Dataset& data, const BackendConfig& cfg,
                                          const CpuOptions& options, std::ostream& log) {
  return std::make_unique<CpuBackend>(pg, model, data, cfg, options, log);
}

}  // namespace gpurun::runtime

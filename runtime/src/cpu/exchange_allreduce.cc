// exchange_allreduce.cc: the allreduce exchange (exchange.h). Every rank keeps its own copy of
// the parameters; one MPI_Allreduce sums the whole gradient buffer (gradients + stat slots), then
// every rank applies the same SGD step, its workers each taking a share of the parameters. With
// --grad-compression powersgd:R (or acp:R, alternating) the Dense layers' gradients go through
// PowerSGD (powersgd.h) instead of the allreduce whole.
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/powersgd.h"
#include "exchange.h"
#include "gpurun/kernels/sgd.h"

namespace gpurun::runtime::cpu {
namespace {

class AllreduceExchange final : public CpuExchange {
 public:
  AllreduceExchange(ProcessGroup& pg, Model& model, const ExchangeSetup& setup, int members)
      : pg_(pg),
        model_(model),
        setup_(setup),
        members_(members),
        whole_{{0, model.grad_buffer_floats()}},
        all_params_{{0, model.param_floats()}},
        velocity_(setup.momentum != 0.0f ? model.param_floats() : 0),
        hierarchical_(setup.requested == Exchange::kHierarchical),
        buckets_(setup.bucket_floats),
        pending_end_(model.param_floats()),
        hook_{buckets_ ? Model::GradReady{[this](std::size_t from) { on_ready(from); },
                                          [this] { progress(); }}
                       : Model::GradReady{}} {
    if (setup.powersgd_rank > 0) {
      std::vector<LowRankMatrix> dense;
      for (std::size_t k = 0; k < model.deferred().size(); ++k) {
        const Model::Deferred& d = model.deferred()[k];
        dense.push_back({d.offset, d.rows, d.in, k});
      }
      powersgd_ = std::make_unique<PowerSgd>(dense, model.grad_buffer_floats(),
                                             setup.powersgd_rank, pg.size(), kPowerSgdSeed,
                                             setup.powersgd_alternate);
      // One model, whole batches: its Dense layers defer dW, and PowerSGD forms each compressed
      // G straight into its M a piece at a time (PowerSgd::AddGradient). With micro-batches,
      // M += E runs on the last one's blocks of dW rows as backward finishes each. More
      // replicas add their gradients after all finish, so theirs wait for the exchange.
      if (members == pg.size() && setup.micro_batch == 0)
        defer_dense();
      else if (members == pg.size() && !setup.powersgd_alternate)  // (alternating: no rows)
        hook_ = {[this](std::size_t from) { powersgd_->rows_final(model_.grads(), from); },
                 [] {}};
    }
  }

  const char* name() const override {
    if (powersgd_) return setup_.powersgd_alternate ? "acp-sgd" : "powersgd";
    return hierarchical_ ? "hierarchical" : buckets_ ? "overlap" : "allreduce";
  }
  const Model::GradReady* ready_hook() override { return hook_.ready ? &hook_ : nullptr; }
  std::string summary() const override {
    const int nodes = pg_.nodes();
    std::string s = hierarchical_ ? "hierarchical allreduce (" + std::to_string(nodes) +
                                        (nodes == 1 ? " node)" : " nodes)")
                                  : std::string("allreduce");
    if (buckets_)
      s += ", overlapped with backward in buckets of " +
           std::to_string(buckets_ * sizeof(float) / 1000) + " kB";
    return powersgd_ ? s + ", " + powersgd_->summary() : s;
  }
  std::size_t bytes_per_step() const override {
    return powersgd_ ? powersgd_->bytes_per_step() : model_.grad_buffer_floats() * sizeof(float);
  }
  std::string compression() const override {
    if (!powersgd_) return "none";
    return (setup_.powersgd_alternate ? "acp:" : "powersgd:") +
           std::to_string(setup_.powersgd_rank);
  }
  bool deferred() const override { return !x_.empty(); }
  const std::vector<Layer::Range>& summed() const override { return whole_; }
  const float* velocity() const override { return velocity_.size() ? velocity_.data() : nullptr; }

  void set_state(const float* params, const float* velocity) override {
    const std::size_t bytes = model_.param_floats() * sizeof(float);
    if (pg_.rank() == 0) {
      std::memcpy(model_.params(), params, bytes);
      if (velocity_.size()) {
        if (velocity)
          std::memcpy(velocity_.data(), velocity, bytes);
        else
          velocity_.fill(0.0f);
      }
    }
    pg_.broadcast(model_.params(), bytes, 0);
    if (velocity_.size()) pg_.broadcast(velocity_.data(), bytes, 0);
  }

  void combine_and_update(float lr, WorkerPool& pool) override {
    const auto t = std::chrono::steady_clock::now();
    auto sum = [this](float* data, std::size_t n) {
      if (hierarchical_)
        pg_.allreduce_sum_hierarchical(data, n);
      else
        pg_.allreduce_sum(data, n);
    };
    float* vel = velocity_.size() ? velocity_.data() : nullptr;
    if (powersgd_) {
      powersgd_sum_and_step(sum, lr, vel);
      seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
      update(powersgd_->whole(), lr, vel, pool);  // what travelled whole
      return;
    }
    if (buckets_)
      finish_buckets();
    else
      sum(model_.grads(), model_.grad_buffer_floats());  // the step's one collective
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    update(all_params_, lr, vel, pool);
  }

 private:
  ProcessGroup& pg_;
  Model& model_;
  ExchangeSetup setup_;
  int members_;
  std::vector<Layer::Range> whole_;
  std::vector<std::pair<std::size_t, std::size_t>> all_params_;  // [0, param_floats)
  FloatBuffer velocity_;
  // PowerSGD's exchange; the compressed matrices take their SGD step as it hands out their M^:
  // a plain step (no momentum, no weight decay) straight from P and Q, W -= lr / ranks P Q^T.
  void powersgd_sum_and_step(const PowerSgd::Sum& sum, float lr, float* vel) {
    PowerSgd::Apply step;
    if (setup_.momentum == 0.0f && setup_.weight_decay == 0.0f) {
      step.into = model_.params();
      step.scale = -lr / float(members_);
    } else {
      step.piece = [&](std::size_t at, const float* piece, std::size_t n) {
        sgd_piece(setup_, members_, lr, model_.params() + at, piece, vel ? vel + at : nullptr, n);
      };
    }
    PowerSgd::Start start;
    if (!hierarchical_)  // (its sum blocks)
      start = [this](float* data, std::size_t n) { return pg_.start_allreduce_sum(data, n); };
    PowerSgd::AddGradient add;
    if (deferred()) {
      add = [this](const LowRankMatrix& m, int lo, int hi, float* into) {
        add_deferred(m.id, lo, hi, 1.0f, into);
      };
      for (std::size_t k = 0; k < x_.size(); ++k) {  // dW of what is not compressed, whole
        const Model::Deferred& d = model_.deferred()[k];
        if (!powersgd_->compresses(d.offset))
          add_deferred(k, 0, d.in, 0.0f, model_.grads() + d.offset);
      }
    }
    powersgd_->allreduce_sum(sum, model_.grads(), step, start, add);
  }
  // The Dense layers defer dW to the exchange (Model::forward_backward_deferred), their X and
  // dZ in buffers of this exchange's.
  void defer_dense() {
    for (std::size_t k = 0; k < model_.deferred().size(); ++k) {
      const Model::Deferred& d = model_.deferred()[k];
      x_.emplace_back(std::size_t(setup_.slice) * std::size_t(d.in));
      dz_.emplace_back(std::size_t(setup_.slice) * std::size_t(d.rows));
      model_.bind_deferred(k, x_.back().data(), dz_.back().data());
    }
  }
  // into = beta into + columns [lo, hi) of deferred layer k's dW (dZ^T X), `into` its matrix.
  void add_deferred(std::size_t k, int lo, int hi, float beta, float* into) {
    model_.layers()[model_.deferred()[k].layer]->weight_cols(setup_.slice, x_[k].data(),
                                                             dz_[k].data(), lo, hi, 1.0f, beta,
                                                             into);
  }
  // The SGD step on the parameters in `ranges` (the stat slots past them left out), each worker
  // of the pool taking its share of each.
  void update(const std::vector<std::pair<std::size_t, std::size_t>>& ranges, float lr,
              float* vel, WorkerPool& pool) {
    const std::size_t end = model_.param_floats();
    pool.run([&](int w) {
      for (const auto& [begin, stop] : ranges) {
        if (begin >= end) continue;
        std::size_t lo, hi;
        share(std::min(stop, end) - begin, pool.size(), w, lo, hi);
        sgd_range(setup_, members_, lr, model_.params(), model_.grads(), vel, begin + lo,
                  begin + hi);
      }
    });
  }
  // Backward has finished the gradients from `from` on: the part not yet being summed goes out
  // once it holds a bucket's worth; every sum under way gets a chance to progress.
  void on_ready(std::size_t from) {
    if (pending_end_ > from && pending_end_ - from >= buckets_) {
      sums_.push_back(pg_.start_allreduce_sum(model_.grads() + from, pending_end_ - from));
      pending_end_ = from;
    }
    progress();
  }
  void progress() {
    for (auto& s : sums_) s->test();
  }
  // After backward: the rest of the gradient and the stat slots, then every sum's end.
  void finish_buckets() {
    float* g = model_.grads();
    if (pending_end_ > 0) sums_.push_back(pg_.start_allreduce_sum(g, pending_end_));
    const std::size_t n = model_.param_floats();
    sums_.push_back(pg_.start_allreduce_sum(g + n, model_.grad_buffer_floats() - n));
    for (auto& s : sums_) s->wait();
    sums_.clear();
    pending_end_ = n;
  }

  bool hierarchical_;
  std::size_t buckets_;      // floats a bucket holds at least (0: no overlap)
  std::size_t pending_end_;  // the gradients from here to the end are being summed
  std::vector<std::unique_ptr<PendingSum>> sums_;
  Model::GradReady hook_;
  std::unique_ptr<PowerSgd> powersgd_;
  std::vector<FloatBuffer> x_, dz_;  // per deferred layer, when PowerSGD forms dW (defer_dense)
  static constexpr std::uint64_t kPowerSgdSeed = 0x506f776572534744;  // every rank's Q alike
};

// What buckets overlap: one model's backward, its whole gradient summed at once.
void check_buckets(const ExchangeSetup& setup, std::size_t models) {
  if (setup.bucket_floats == 0) return;
  const char* why = models > 1 ? "with --threads T > 1 the replicas' gradients are added after "
                                 "all of them finish"
                    : setup.micro_batch > 0 ? "with --micro-batch the gradient is final only "
                                              "after the last micro-batch"
                    : setup.powersgd_rank > 0 ? "PowerSGD compresses whole matrices"
                    : setup.requested == Exchange::kHierarchical ? "the hierarchical sum is "
                                                                   "blocking"
                                                                 : nullptr;
  if (why)
    throw std::invalid_argument(std::string("--bucket-mb cannot overlap the sums here: ") + why);
}

}  // namespace

void sgd_piece(const ExchangeSetup& setup, int members, float lr, float* params,
               const float* grads, float* velocity, std::size_t n) {
  kernels::SgdDesc d;
  d.n = n;
  d.lr = lr;
  d.momentum = setup.momentum;
  d.weight_decay = setup.weight_decay;
  d.grad_scale = 1.0f / float(members);
  kernels::cpu::sgd_step(d, params, grads, velocity);
}

void sgd_range(const ExchangeSetup& setup, int members, float lr, float* params, const float* grads,
               float* velocity, std::size_t lo, std::size_t hi) {
  sgd_piece(setup, members, lr, params + lo, grads + lo, velocity ? velocity + lo : nullptr,
            hi - lo);
}

std::unique_ptr<CpuExchange> make_allreduce_exchange(ProcessGroup& pg,
                                                     std::vector<std::unique_ptr<Model>>& models,
                                                     const ExchangeSetup& setup) {
  const int members = pg.size() * int(models.size());
  check_buckets(setup, models.size());
  return std::make_unique<AllreduceExchange>(pg, *models[0], setup, members);
}

}  // namespace gpurun::runtime::cpu

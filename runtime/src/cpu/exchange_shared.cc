// exchange_shared.cc: the shared-memory exchange (exchange.h) for ranks on one node. One block of
// node-shared memory (an MPI-3 window; plain memory for one rank) holds the parameters and
// momentum, every member's X and dZ of each Dense layer, and one slot per rank for the small
// gradients. Members are (rank, worker) pairs, rank-major: X and dZ of all members lie one after
// another, so one sgemm over them sums every member's gradient.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <ostream>
#include <stdexcept>

#include "exchange.h"

namespace gpurun::runtime::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Where each part lives in the shared block, in floats.
struct Arena {
  std::size_t params = 0, velocity = 0, small = 0, total = 0;
  std::vector<std::size_t> x, dz;  // per deferred layer

  std::size_t take(std::size_t floats) {
    const std::size_t at = total;
    total += (floats + kParamAlign - 1) / kParamAlign * kParamAlign;
    return at;
  }
};

class SharedExchange final : public CpuExchange {
 public:
  SharedExchange(ProcessGroup& pg, std::vector<std::unique_ptr<Model>>& models,
                 const ExchangeSetup& setup)
      : pg_(pg),
        models_(models),
        model_(*models[0]),
        setup_(setup),
        workers_(int(models.size())),
        members_(pg.size() * workers_),
        n_(model_.param_floats()),
        small_(model_.undeferred_ranges()) {
    exchanged_ = small_;
    exchanged_.push_back({n_, n_ + kStatSlots});
    for (const Layer::Range& r : exchanged_) small_floats_ += r.end - r.begin;
    lay_out();
  }

  // Maps the block; nullptr-equivalent (false) with why_not when the ranks cannot share one.
  bool map(std::string& why_not) {
    try {
      shm_ = pg_.allocate_shared(arena_.total * sizeof(float), why_not);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(e.what()) + " (allocating " +
                               std::to_string(arena_.total * sizeof(float) >> 20) +
                               " MiB for the shared-memory exchange; --exchange allreduce needs "
                               "none)");
    }
    if (!shm_) return false;
    base_ = static_cast<float*>(shm_->data());
    bind_models();
    return true;
  }

  const char* name() const override { return "shared"; }
  std::string summary() const override { return "shared-memory exchange"; }
  bool deferred() const override { return true; }
  bool fused() const override { return fused_; }
  const std::vector<Layer::Range>& summed() const override { return exchanged_; }
  const float* velocity() const override { return velocity_; }

  void set_state(const float* params, const float* velocity) override {
    // One copy: rank 0 writes it, everybody reads it after the fence.
    if (pg_.rank() == 0) {
      std::memcpy(model_.params(), params, n_ * sizeof(float));
      if (velocity_ && velocity) std::memcpy(velocity_, velocity, n_ * sizeof(float));
      if (velocity_ && !velocity) std::fill(velocity_, velocity_ + n_, 0.0f);
    }
    shm_->fence();
  }

  void combine_and_update(float lr, WorkerPool& pool) override {
    const auto t1 = Clock::now();
    sum_small_gradients();
    seconds_ += since(t1);
    pool.run([&](int w) { update_rows(lr, pg_.rank() * workers_ + w); });
    const auto t3 = Clock::now();
    shm_->fence();  // the new parameters are in place before anyone's next forward
    seconds_ += since(t3);
  }

 private:
  void lay_out() {
    arena_.params = arena_.take(n_);
    arena_.velocity = arena_.take(setup_.momentum != 0.0f ? n_ : 0);
    for (const Model::Deferred& d : model_.deferred()) {
      arena_.x.push_back(arena_.take(std::size_t(members_) * setup_.slice * std::size_t(d.in)));
      arena_.dz.push_back(arena_.take(std::size_t(members_) * setup_.slice * std::size_t(d.rows)));
    }
    arena_.small = arena_.take(std::size_t(pg_.size()) * small_floats_);
    // Plain SGD goes inside the Dense layers' sgemm (w += -lr/N dZ^T X): no dW written, no
    // separate pass over the weights. Momentum and weight decay need dW itself.
    fused_ = setup_.momentum == 0.0f && setup_.weight_decay == 0.0f;
  }

  // The block starts uninitialised: each member's X and dZ are written by that member before
  // anyone reads them, so their pages land on the writer's NUMA node.
  void bind_models() {
    if (setup_.momentum != 0.0f) velocity_ = base_ + arena_.velocity;
    model_.use_param_storage(base_ + arena_.params);
    for (int w = 0; w < workers_; ++w) {
      const std::size_t m = std::size_t(pg_.rank()) * workers_ + w;
      for (std::size_t k = 0; k < model_.deferred().size(); ++k) {
        const Model::Deferred& d = model_.deferred()[k];
        models_[w]->bind_deferred(k, base_ + arena_.x[k] + m * setup_.slice * std::size_t(d.in),
                                  base_ + arena_.dz[k] + m * setup_.slice * std::size_t(d.rows));
      }
    }
  }

  // The small gradients and the stats go through this rank's slot; after the fence every rank
  // adds all slots in rank order (so all get the same sums).
  void sum_small_gradients() {
    float* grads = model_.grads();
    float* slots = base_ + arena_.small;
    float* mine = slots + std::size_t(pg_.rank()) * small_floats_;
    for (const Layer::Range& r : exchanged_) mine = std::copy(grads + r.begin, grads + r.end, mine);
    shm_->fence();  // every rank's X, dZ and small gradients are written; W is no longer read
    for (const Layer::Range& r : exchanged_) std::fill(grads + r.begin, grads + r.end, 0.0f);
    for (int q = 0; q < pg_.size(); ++q) {
      const float* from = slots + std::size_t(q) * small_floats_;
      for (const Layer::Range& r : exchanged_) {
        for (std::size_t i = r.begin; i < r.end; ++i) grads[i] += *from++;
      }
    }
  }

  // Member m updates its share of every deferred layer's rows from all members' X and dZ;
  // member 0 also steps the small parameters.
  void update_rows(float lr, int m) {
    float* grads = model_.grads();
    const float scale = 1.0f / float(members_);
    for (std::size_t k = 0; k < model_.deferred().size(); ++k) {
      const Model::Deferred& d = model_.deferred()[k];
      std::size_t lo, hi;
      share(std::size_t(d.rows), members_, m, lo, hi);
      const float* xa = base_ + arena_.x[k];
      const float* dza = base_ + arena_.dz[k];
      const int batch = members_ * setup_.slice;
      if (fused_) {
        model_.deferred_weight_rows(k, batch, xa, dza, int(lo), int(hi), -lr * scale, 1.0f,
                                    model_.params());
      } else {
        model_.deferred_weight_rows(k, batch, xa, dza, int(lo), int(hi), 1.0f, 0.0f, grads);
        sgd_range(setup_, members_, lr, model_.params(), grads, velocity_,
                  d.offset + lo * std::size_t(d.in), d.offset + hi * std::size_t(d.in));
      }
    }
    if (m == 0) {
      for (const Layer::Range& r : small_) {
        sgd_range(setup_, members_, lr, model_.params(), grads, velocity_, r.begin, r.end);
      }
    }
  }

  ProcessGroup& pg_;
  std::vector<std::unique_ptr<Model>>& models_;
  Model& model_;
  ExchangeSetup setup_;
  int workers_, members_;
  std::size_t n_;
  std::vector<Layer::Range> small_;      // the parameters SGD steps separately
  std::vector<Layer::Range> exchanged_;  // their gradients and the stat slots: what is summed
  std::size_t small_floats_ = 0;
  Arena arena_;
  bool fused_ = false;
  std::unique_ptr<SharedMemory> shm_;
  float* base_ = nullptr;
  float* velocity_ = nullptr;
};

}  // namespace

std::unique_ptr<CpuExchange> make_shared_exchange(ProcessGroup& pg,
                                                  std::vector<std::unique_ptr<Model>>& models,
                                                  const ExchangeSetup& setup,
                                                  std::string& why_not) {
  auto ex = std::make_unique<SharedExchange>(pg, models, setup);
  if (!ex->map(why_not)) return nullptr;
  return ex;
}

std::unique_ptr<CpuExchange> make_exchange(ProcessGroup& pg,
                                           std::vector<std::unique_ptr<Model>>& models,
                                           const ExchangeSetup& setup, std::ostream& log) {
  if (setup.requested == Exchange::kShared && setup.micro_batch > 0) {
    throw std::invalid_argument(
        "--exchange shared cannot accumulate micro-batches: use --exchange allreduce with "
        "--micro-batch");
  }
  std::unique_ptr<CpuExchange> ex;
  if (setup.requested != Exchange::kAllreduce && setup.micro_batch == 0) {
    std::string why_not;
    ex = make_shared_exchange(pg, models, setup, why_not);
    if (!ex && setup.requested == Exchange::kShared) {
      throw std::invalid_argument("--exchange shared: " + why_not);
    }
    if (!ex) log << "exchange: allreduce, not shared memory: " << why_not << "\n";
  }
  if (!ex) ex = make_allreduce_exchange(pg, models, setup);
  for (std::size_t w = 1; w < models.size(); ++w) models[w]->share_params(*models[0]);
  return ex;
}

}  // namespace gpurun::runtime::cpu

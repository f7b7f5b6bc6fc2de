// exchange_shared.cc: the shared-memory exchange (exchange.h) for ranks on one node. One block of
// node-shared memory (an MPI-3 window; plain memory for one rank) holds the parameters and
// momentum, every member's X and dZ of each Dense layer, one slot per rank for the small
// gradients, and four counters. Members are (rank, worker) pairs, rank-major: X and dZ of all
// members lie one after another, so one sgemm over them sums every member's gradient.
//
// A big Dense layer (mnist_cnn's 21,632 x 128) is split by columns: its inputs are cut into
// fixed blocks (kChunkCols columns, or one channel of the convolution below), each member owns a
// run of blocks and is the only one to read or write those columns of W. Its forward forms the
// partial product of each of its blocks for every member's images, and each member adds the
// partials of its own images in block order; its backward forms its blocks of dX for every
// member's images and steps each block from every member's X and dZ right after forming its dX,
// while the block is in cache (one pass over W in the backward, not two). So W
// never travels between cores (between their caches): only X, dZ, dX and the partial products
// do, which are smaller at these sizes. The members meet four times a step on `met` for it.
//
// Every product is formed block by block, the same call whoever owns the block, so where the
// boundaries fall never changes the bits. That lets them move: each member times its split
// work, and rank 0 moves each boundary by at most a block a step toward shares proportional to
// the members' speeds (split_balance.h), so a slower core gets fewer blocks instead of keeping
// the others waiting. The boundaries of a step are in one of two slots of the block, by the
// step's parity: rank 0 writes the next step's slot while everyone reads this step's.
//
// When that layer comes right after a convolution that is the first layer (mnist_cnn), the
// convolution splits with it, by whole channels (its output is NCHW, so a channel is a run of
// the Dense layer's columns): each member computes its own columns of X for every member's
// images (their inputs are in the block too) and, in the backward, its channels' parameter
// gradient from its own columns of dX. Then X and dX never leave the core that owns them
// either, and two of the four meetings fall away: every member's input in place; every
// partial product in place; every dZ in place.
//
// The other Dense layers, small, stay whole: each member reads all of W, and says so on
// `released` when its Dense layers are done (their weights read, X and dZ written), before the
// convolution's backward. Their update is cut into chunks of kChunkCols columns that members
// claim from `claimed` once every member has released. Every chunk is the same sgemm whoever
// runs it, so the result does not depend on who took which. One barrier ends the step: the new
// parameters are in place before anyone's next forward.
//
// A member alone (one rank, one thread: no one else reads its weights or waits for their step)
// steps every Dense layer that way, block by block inside its backward, with no split and no
// chunk left to claim.
//
// Every wait on a counter is bounded by the communication timeout (shared_wait.h): a peer that is
// stopped, stuck or dead is named, with its pid, instead of hanging the node's ranks.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "exchange.h"
#include "gpurun/common/strings.h"
#include "shared_wait.h"
#include "split_balance.h"

namespace gpurun::runtime::cpu {
namespace {

using Clock = std::chrono::steady_clock;

using common::seconds_since;

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Columns of a Dense weight matrix per update chunk (mnist_cnn's first Dense layer has 21,632):
// fixed, so the chunks (and the bits of the result) are the same for any number of ranks and
// threads. Columns, not rows: a chunk reads only its columns of X, so the chunks of a step read
// every member's X once between them.
constexpr int kChunkCols = 1024;

// The balance: a new rate counts this much in each member's running mean, and a boundary moves
// when its target is more than this many blocks away.
constexpr double kRateWeight = 0.1;
constexpr double kBoundarySlack = 0.6;

// Counters that only grow: a step's target is (step + 1) x arrivals per step, never reset. Each
// on its own cache line (shared_wait.h).
struct Control {
  Counter met;        // members' arrivals at the split layers' meeting points
  Counter released;   // members whose Dense weights are read and X, dZ written
  Counter published;  // ranks whose small gradients are in their slot
  Counter claimed;    // update chunks handed out (and one miss per member per step)
  Counter closed;     // ranks whose step is done (the new parameters written)
};

// Room for Control at whatever 64-byte boundary falls first in it.
constexpr std::size_t kControlFloats = (sizeof(Control) + alignof(Control)) / sizeof(float);

// Columns [lo, hi) of deferred layer k's weight matrix: one unit of the update.
struct Chunk {
  std::size_t k;
  int lo, hi;
};

// Where each part lives in the shared block, in floats.
struct Arena {
  std::size_t control = 0, progress = 0, params = 0, velocity = 0, small = 0, input = 0, total = 0;
  std::size_t edges = 0, times = 0;      // the split's boundaries and the members' split seconds
  std::vector<std::size_t> x, dz;        // per deferred layer
  std::vector<std::size_t> dx, partial;  // per split layer (0 for the others)

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
    for (std::size_t k = 0; k < model_.deferred().size(); ++k) {
      const Model::Deferred& d = model_.deferred()[k];
      // Split where every member gets a chunk's worth of columns.
      split_.push_back(members_ > 1 && model_.splittable(k) && d.in >= members_ * kChunkCols);
      if (split_.back() || alone()) continue;
      for (int lo = 0; lo < d.in; lo += kChunkCols) {
        chunks_.push_back({k, lo, std::min(lo + kChunkCols, d.in)});
      }
    }
    plan_first_layer();
    const std::vector<double>& weights = setup_.split.weights;
    if (!weights.empty() && int(weights.size()) != members_) {
      throw std::invalid_argument("split shares: " + std::to_string(weights.size()) +
                                  " weights for " + std::to_string(members_) +
                                  " members (ranks x threads on the node)");
    }
    for (int w = 0; w < workers_; ++w) {
      peers_.emplace_back(*this, *models[std::size_t(w)], pg.rank() * workers_ + w, w == 0);
    }
    lay_out();
  }

  // Maps the block; nullptr-equivalent (false) with why_not when the ranks cannot share one.
  bool map(std::string& why_not) {
    try {
      shm_ = pg_.allocate_shared(arena_.total * sizeof(float), why_not);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(e.what()) + " (allocating " +
                               std::to_string(arena_.total * sizeof(float) >> 20) +
                               " MiB for the shared-memory exchange; the allreduce exchange "
                               "needs none)");
    }
    if (!shm_) return false;
    base_ = static_cast<float*>(shm_->data());
    // The counters' cache lines start at the block's first 64-byte boundary (every rank maps
    // the block at a page boundary plus the same offset, so all agree where that is).
    void* control = base_ + arena_.control;
    std::size_t room = kControlFloats * sizeof(float);
    if (!std::align(alignof(Control), sizeof(Control), control, room)) {
      throw std::logic_error("the shared-memory exchange has no room for its counters");
    }
    control_ = static_cast<Control*>(control);
    RankArrivals* progress = place_progress();
    if (pg_.rank() == 0) {
      new (control) Control{};
      for (int r = 0; r < pg_.size(); ++r) new (progress + r) RankArrivals{};
      start_edges();
    }
    bind_models();
    shm_->fence();  // the counters are zero before anyone counts
    waits_.emplace(progress, pg_.rank(), pg_.size(), setup_.timeout_s);
    return true;
  }

  const char* name() const override { return "shared"; }
  std::size_t bytes_per_step() const override { return 0; }  // it sends nothing off the node
  // Across nodes an allreduce of the whole buffer takes its place.
  std::size_t wire_bytes_per_step() const override {
    return model_.grad_buffer_floats() * sizeof(float);
  }
  std::string summary() const override {
    const auto n = std::count(split_.begin(), split_.end(), true);
    if (n == 0) return "shared-memory exchange";
    std::string shares = "even";
    if (setup_.split.measured) {
      shares = "by measured speed";
    } else if (!setup_.split.weights.empty()) {
      shares.clear();
      for (double w : setup_.split.weights) shares += (shares.empty() ? "" : ":") + number(w);
    }
    return "shared-memory exchange, " + std::to_string(n) + " Dense layer" + (n > 1 ? "s" : "") +
           " split by columns (shares " + shares + ")";
  }
  // Each member's blocks of each split layer as the next step has them.
  std::string note() const override {
    std::string out;
    for (std::size_t k = 0; k < split_.size(); ++k) {
      if (!split_[k]) continue;
      const std::int32_t* e = edges(step_ % 2, k);
      out += out.empty() ? "split " : ", ";
      for (int m = 0; m < members_; ++m) out += (m ? ":" : "") + std::to_string(e[m + 1] - e[m]);
      out += " blocks";
    }
    return out;
  }
  DeferredPeers* peers(int worker, float lr) override {
    Peers& p = peers_.at(std::size_t(worker));
    p.set_lr(lr);
    return &p;
  }
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
    publish_small_gradients();
    pool.run([&](int w) {
      peers_[std::size_t(w)].publish_busy();
      update_chunks(lr, w == 0);
    });
    balance();
    const auto t = Clock::now();
    waits_->wait(control_->published, (step_ + 1) * std::uint64_t(pg_.size()),
                 "the small gradients of every rank", step_);
    sum_small_gradients();
    if (pg_.rank() == 0) {
      for (const Layer::Range& r : small_) {
        sgd_range(setup_, members_, lr, model_.params(), model_.grads(), velocity_, r.begin, r.end);
      }
    }
    // The new parameters are in place before anyone's next forward: a barrier on a counter,
    // bounded as every wait here is (an MPI barrier would wait for a stopped peer forever).
    waits_->arrive(control_->closed);
    waits_->wait(control_->closed, (step_ + 1) * std::uint64_t(pg_.size()),
                 "every rank's end of the step", step_);
    seconds_ += seconds_since(t);
    ++step_;
  }

 private:
  // One member's view of the others (Model::forward_backward_deferred's DeferredPeers).
  class Peers final : public DeferredPeers {
   public:
    Peers(SharedExchange& ex, Model& own, int member, bool timed)
        : ex_(ex), own_(own), m_(member), timed_(timed) {}
    bool split(std::size_t k) const override { return ex_.split_.at(k); }
    bool split_first() const override { return ex_.first_split_; }
    // The first layer's columns of deferred layer 0 that this member owns, for every member's
    // images: its output from every member's input (once all are in place), its parameter
    // gradient from its own columns of dX.
    // One call over the member's channels: the layer gives each channel the same bits whatever
    // others a call covers (Layer::forward_cols).
    void forward_first() override {
      meet();  // every member's input is in place
      const Chunk c = ex_.own_cols(0, m_);
      split_work([&] {
        own_.first_forward_cols(ex_.all_images(), ex_.at(ex_.arena_.input), c.lo, c.hi,
                                ex_.at(ex_.arena_.x[0]));
      });
    }
    void backward_first() override {
      const Chunk c = ex_.own_cols(0, m_);
      split_work([&] {
        own_.first_backward_cols(ex_.all_images(), ex_.at(ex_.arena_.input),
                                 ex_.at(ex_.arena_.x[0]), ex_.at(ex_.arena_.dx[0]), c.lo, c.hi);
      });
    }
    void forward(std::size_t k, float* z) override { ex_.split_forward(k, *this, z); }
    void backward_data(std::size_t k) override { ex_.split_backward_data(k, *this); }
    void released() override { ex_.waits_->arrive(ex_.control_->released); }
    bool updates_in_backward(std::size_t) const override { return ex_.alone(); }
    void backward_and_update(std::size_t k, float* dx) override {
      ex_.step_in_backward(k, dx, lr_);
    }
    void set_lr(float lr) { lr_ = lr; }
    float lr() const { return lr_; }

    int member() const { return m_; }
    // Runs f, counting its seconds as this member's split work of the step.
    template <class F>
    void split_work(F f) {
      const auto t = Clock::now();
      f();
      busy_ += seconds_since(t);
    }
    // The step's split work is done: its seconds go to the member's slot for rank 0's balance.
    void publish_busy() {
      ex_.times(ex_.step_ % 2)[m_] = busy_;
      busy_ = 0;
    }
    // Every member arrives at the same meeting points in the same order, so the n-th meeting
    // is over when `met` reaches n x members.
    void meet() {
      ex_.waits_->arrive(ex_.control_->met);
      const auto t = Clock::now();
      ex_.waits_->wait(ex_.control_->met, ++meetings_ * std::uint64_t(ex_.members_),
                       "every member at a split layer", ex_.step_);
      if (timed_) ex_.seconds_ += seconds_since(t);
    }

   private:
    SharedExchange& ex_;
    Model& own_;  // this member's model (its gradient buffer)
    int m_;
    bool timed_;  // the rank's first worker times the waits
    std::uint64_t meetings_ = 0;
    double busy_ = 0;  // seconds of split work in this step so far
    float lr_ = 0;     // the step's learning rate
  };

  // A member alone steps its Dense layers inside backward (DeferredPeers::updates_in_backward):
  // no other member reads its weights or waits for their step. Then no chunk is left to claim.
  bool alone() const { return members_ == 1; }

  // Deferred layer k of a member alone, by kChunkCols columns: the block's dX (when dx is not
  // null) from the weights before the step, then the block's step. Each column's dX and step
  // are the same sgemm calls, with the same bits, as the whole layer's and update_chunks' are.
  void step_in_backward(std::size_t k, float* dx, float lr) {
    const int in = model_.deferred()[k].in;
    for (int lo = 0; lo < in; lo += kChunkCols) {
      const int hi = std::min(lo + kChunkCols, in);
      if (dx) model_.deferred_input_grad_cols(k, setup_.slice, at(arena_.dz[k]), lo, hi, dx);
      update_chunk(lr, {k, lo, hi});
    }
  }

  // Member m's forward of split layer k: once every X is in place, the partial product of each
  // of its blocks for all members' images; once every partial is in place, the sum of its
  // images' rows of all blocks, in block order (so the same sums whoever formed which block).
  void split_forward(std::size_t k, Peers& p, float* z) {
    const Model::Deferred& d = model_.deferred()[k];
    const std::size_t part = std::size_t(all_images()) * d.rows;  // one block's partial
    const std::size_t mine = std::size_t(setup_.slice) * d.rows;
    float* partials = at(arena_.partial[k]);
    if (!owns_x(k)) p.meet();  // every member's X is in place
    p.split_work([&] {
      each_own_block(k, p.member(), [&](int lo, int hi, int b) {
        model_.deferred_product_cols(k, all_images(), at(arena_.x[k]), lo, hi,
                                     partials + std::size_t(b) * part);
      });
    });
    p.meet();
    const float* first = partials + std::size_t(p.member()) * mine;
    std::copy(first, first + mine, z);
    for (int b = 1; b < blocks(k); ++b) {
      const float* from = first + std::size_t(b) * part;
      for (std::size_t i = 0; i < mine; ++i) z[i] += from[i];
    }
  }

  // Member m's columns of split layer k's dX, for all members' images, once every dZ is in
  // place, each block stepped right after its dX is formed from it (only its owner reads a
  // block's weights); returns when every member's columns are written.
  void split_backward_data(std::size_t k, Peers& p) {
    p.meet();
    p.split_work([&] {
      each_own_block(k, p.member(), [&](int lo, int hi, int) {
        model_.deferred_input_grad_cols(k, all_images(), at(arena_.dz[k]), lo, hi,
                                        at(arena_.dx[k]));
        update_chunk(p.lr(), {k, lo, hi});
      });
    });
    if (!owns_x(k)) p.meet();  // every member's dX is complete
  }

  // Split layer k's blocks: kChunkCols columns (whole 64-byte lines of a row, so no two members
  // write the same line), or one of the first layer's channels when it splits too.
  int block_cols(std::size_t k) const {
    return owns_x(k) ? model_.first_layer_unit() : kChunkCols;
  }
  int blocks(std::size_t k) const {
    return (model_.deferred()[k].in + block_cols(k) - 1) / block_cols(k);
  }
  int block_start(std::size_t k, int b) const {
    return std::min(b * block_cols(k), model_.deferred()[k].in);
  }
  // Split layer k's boundaries in a slot (members + 1 block numbers; Edges in split_balance.h),
  // and the members' split seconds.
  std::int32_t* edges(std::uint64_t slot, std::size_t k) const {
    return reinterpret_cast<std::int32_t*>(at(arena_.edges)) +
           (slot * split_.size() + k) * std::size_t(members_ + 1);
  }
  double* times(std::uint64_t slot) const {
    return reinterpret_cast<double*>(at(arena_.times)) + slot * std::size_t(members_);
  }

  // Member m's columns of split layer k in this step: its run of blocks.
  Chunk own_cols(std::size_t k, int m) const {
    const std::int32_t* e = edges(step_ % 2, k);
    return {k, block_start(k, e[m]), block_start(k, e[m + 1])};
  }
  // Calls f(lo, hi, b) for each block b of split layer k that member m owns in this step.
  template <class F>
  void each_own_block(std::size_t k, int m, F f) const {
    const std::int32_t* e = edges(step_ % 2, k);
    for (int b = e[m]; b < e[m + 1]; ++b) f(block_start(k, b), block_start(k, b + 1), b);
  }

  // Rank 0, before the first fence: both slots hold the starting shares.
  void start_edges() {
    std::vector<double> weights = setup_.split.weights;
    if (weights.empty()) weights.assign(std::size_t(members_), 1.0);
    for (std::size_t k = 0; k < split_.size(); ++k) {
      if (!split_[k]) continue;
      const Edges e = edges_for(blocks(k), weights);
      for (std::uint64_t slot = 0; slot < 2; ++slot) std::copy(e.begin(), e.end(), edges(slot, k));
    }
    std::fill(times(0), times(0) + 2 * members_, 0.0);
  }

  // Rank 0, once its members' split work of this step is done: the boundaries of the next step
  // from the members' speeds in the last one (whose seconds every member wrote before this step
  // began; its boundaries are in the slot the next step's go to). The first step, with its
  // one-time costs, is not measured.
  void balance() {
    if (pg_.rank() != 0 || !setup_.split.measured || step_ < 2) return;
    const std::uint64_t last = (step_ - 1) % 2, next = (step_ + 1) % 2;
    std::vector<double> rates(std::size_t(members_), 0.0);
    for (int m = 0; m < members_; ++m) {
      const double seconds = times(last)[m];
      if (!(seconds > 0)) return;
      double share = 0;  // of the split layers' blocks, in the last step
      for (std::size_t k = 0; k < split_.size(); ++k) {
        if (split_[k]) share += double(edges(last, k)[m + 1] - edges(last, k)[m]) / blocks(k);
      }
      rates[std::size_t(m)] = share / seconds;
    }
    const std::vector<double>& mean = rates_.add(rates);
    for (std::size_t k = 0; k < split_.size(); ++k) {
      if (!split_[k]) continue;
      const std::int32_t* now = edges(step_ % 2, k);
      const Edges e = rebalance(Edges(now, now + members_ + 1), mean, kBoundarySlack);
      std::copy(e.begin(), e.end(), edges(next, k));
    }
  }

  int all_images() const { return members_ * setup_.slice; }
  float* at(std::size_t offset) const { return base_ + offset; }

  // Whether each member computes its own columns of split layer k's X and reads only those
  // columns of dX (the first layer split with it): then no member waits for the others' X or
  // dX.
  bool owns_x(std::size_t k) const { return first_split_ && k == 0; }

  // The first layer splits by channels with deferred layer 0 when that layer is split, comes
  // right after it, and every member's share is whole channels of it.
  void plan_first_layer() {
    if (split_.empty() || !split_[0] || model_.deferred()[0].layer != 1) return;
    const int unit = model_.first_layer_unit(), in = model_.deferred()[0].in;
    first_split_ = unit > 0 && in % unit == 0 && in / unit >= members_;
  }

  // Room for one RankArrivals per rank at whatever 64-byte boundary falls first in it.
  std::size_t progress_floats() const {
    return (std::size_t(pg_.size()) * sizeof(RankArrivals) + alignof(RankArrivals)) /
           sizeof(float);
  }
  RankArrivals* place_progress() {
    void* at = base_ + arena_.progress;
    std::size_t room = progress_floats() * sizeof(float);
    if (!std::align(alignof(RankArrivals), std::size_t(pg_.size()) * sizeof(RankArrivals), at,
                    room)) {
      throw std::logic_error("the shared-memory exchange has no room for its ranks' progress");
    }
    return static_cast<RankArrivals*>(at);
  }

  void lay_out() {
    arena_.control = arena_.take(kControlFloats);
    arena_.progress = arena_.take(progress_floats());
    arena_.params = arena_.take(n_);
    arena_.velocity = arena_.take(setup_.momentum != 0.0f ? n_ : 0);
    const std::size_t all = std::size_t(members_) * setup_.slice;
    arena_.input = first_split_ ? arena_.take(all * model_.input_shape().size()) : 0;
    for (std::size_t k = 0; k < model_.deferred().size(); ++k) {
      const Model::Deferred& d = model_.deferred()[k];
      arena_.x.push_back(arena_.take(all * std::size_t(d.in)));
      arena_.dz.push_back(arena_.take(all * std::size_t(d.rows)));
      arena_.dx.push_back(split_[k] ? arena_.take(all * std::size_t(d.in)) : 0);
      arena_.partial.push_back(
          split_[k] ? arena_.take(std::size_t(blocks(k)) * all * std::size_t(d.rows)) : 0);
    }
    static_assert(sizeof(std::int32_t) == sizeof(float) && sizeof(double) == 2 * sizeof(float));
    arena_.edges = arena_.take(2 * split_.size() * std::size_t(members_ + 1));
    arena_.times = arena_.take(2 * 2 * std::size_t(members_));
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
      if (first_split_) {
        models_[w]->bind_input(base_ + arena_.input +
                               m * setup_.slice * model_.input_shape().size());
      }
      for (std::size_t k = 0; k < model_.deferred().size(); ++k) {
        const Model::Deferred& d = model_.deferred()[k];
        models_[w]->bind_deferred(
            k, base_ + arena_.x[k] + m * setup_.slice * std::size_t(d.in),
            base_ + arena_.dz[k] + m * setup_.slice * std::size_t(d.rows),
            split_[k] ? base_ + arena_.dx[k] + m * setup_.slice * std::size_t(d.in) : nullptr);
      }
    }
  }

  // The small gradients and the stats go through this rank's slot; once all are published every
  // rank adds all slots in rank order (so all get the same sums). A rank writes its slot again
  // only after the step's closing barrier, which every reader passes after reading.
  void publish_small_gradients() {
    const float* grads = model_.grads();
    float* mine = base_ + arena_.small + std::size_t(pg_.rank()) * small_floats_;
    for (const Layer::Range& r : exchanged_) mine = std::copy(grads + r.begin, grads + r.end, mine);
    waits_->arrive(control_->published);
  }

  void sum_small_gradients() {
    float* grads = model_.grads();
    const float* slots = base_ + arena_.small;
    for (const Layer::Range& r : exchanged_) std::fill(grads + r.begin, grads + r.end, 0.0f);
    for (int q = 0; q < pg_.size(); ++q) {
      const float* from = slots + std::size_t(q) * small_floats_;
      for (const Layer::Range& r : exchanged_) {
        for (std::size_t i = r.begin; i < r.end; ++i) grads[i] += *from++;
      }
    }
  }

  // Once every member has released, claims chunks until none is left; each member makes
  // exactly one claim past the end, so a step hands out chunks + members claims.
  void update_chunks(float lr, bool timed) {
    const auto t = Clock::now();
    waits_->wait(control_->released, (step_ + 1) * std::uint64_t(members_),
                 "every member's Dense layers (their weights read, X and dZ written)", step_);
    if (timed) seconds_ += seconds_since(t);
    const std::uint64_t first = step_ * (chunks_.size() + std::uint64_t(members_));
    for (;;) {
      const std::uint64_t c = control_->claimed.n.fetch_add(1, std::memory_order_relaxed) - first;
      if (c >= chunks_.size()) return;
      update_chunk(lr, chunks_[c]);
    }
  }

  // Columns [lo, hi) of deferred layer k, from all members' X and dZ.
  void update_chunk(float lr, const Chunk& c) {
    const Model::Deferred& d = model_.deferred()[c.k];
    const float* xa = base_ + arena_.x[c.k];
    const float* dza = base_ + arena_.dz[c.k];
    const int batch = members_ * setup_.slice;
    if (fused_) {
      model_.deferred_weight_cols(c.k, batch, xa, dza, c.lo, c.hi, -lr * (1.0f / float(members_)),
                                  1.0f, model_.params());
      return;
    }
    float* grads = model_.grads();
    model_.deferred_weight_cols(c.k, batch, xa, dza, c.lo, c.hi, 1.0f, 0.0f, grads);
    for (int row = 0; row < d.rows; ++row) {
      const std::size_t at = d.offset + std::size_t(row) * d.in;
      sgd_range(setup_, members_, lr, model_.params(), grads, velocity_, at + c.lo, at + c.hi);
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
  std::vector<bool> split_;    // per deferred layer
  bool first_split_ = false;   // the first layer splits with deferred layer 0 (plan_first_layer)
  std::vector<Chunk> chunks_;  // the unsplit layers' update, claimed
  RateFilter rates_{kRateWeight};  // rank 0: the members' split work per second
  std::vector<Peers> peers_;   // per worker of this rank
  Arena arena_;
  bool fused_ = false;
  Control* control_ = nullptr;
  std::optional<SharedWaits> waits_;  // once mapped
  std::uint64_t step_ = 0;  // steps combined so far: the counters' targets
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
        "the shared exchange cannot accumulate micro-batches (micro_batch " +
        std::to_string(setup.micro_batch) + "): the allreduce exchange can");
  }
  if (setup.requested == Exchange::kShared && (setup.powersgd_rank > 0 || setup.bucket_floats))
    throw std::invalid_argument(
        std::string(setup.powersgd_rank > 0 ? "--grad-compression powersgd or acp compresses"
                                            : "--bucket-mb overlaps the sums of") +
        " the gradients ranks allreduce; the shared exchange sends none (give --exchange "
        "allreduce or auto)");
  std::unique_ptr<CpuExchange> ex;
  const bool allreduce =
      setup.requested == Exchange::kAllreduce || setup.requested == Exchange::kHierarchical;
  if (!allreduce && setup.micro_batch == 0 && setup.powersgd_rank == 0 &&
      setup.bucket_floats == 0) {
    std::string why_not;
    ex = make_shared_exchange(pg, models, setup, why_not);
    if (!ex && setup.requested == Exchange::kShared) {
      throw std::invalid_argument("the shared exchange cannot be used: " + why_not);
    }
    if (!ex) log << "exchange: allreduce, not shared memory: " << why_not << "\n";
  }
  if (!ex) ex = make_allreduce_exchange(pg, models, setup);
  for (std::size_t w = 1; w < models.size(); ++w) models[w]->share_params(*models[0]);
  return ex;
}

}  // namespace gpurun::runtime::cpu

// exchange.h (private): how the CPU ranks combine their gradients and step the parameters, one
// interface with two implementations (backend.h, Exchange, says what each does):
//   allreduce: exchange_allreduce.cc, one MPI_Allreduce of the whole gradient buffer;
//   shared:    exchange_shared.cc, one copy of the parameters in node-shared memory.
// The members of an exchange are (rank, worker) pairs: --threads T gives each rank T replicas of
// the model (models[w], worker w of the rank's pool), each on batch/T images.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "gpurun/runtime/backend.h"
#include "cpu/model.h"
#include "gpurun/runtime/process_group.h"
#include "worker_pool.h"

namespace gpurun::runtime::cpu {

struct ExchangeSetup {
  Exchange requested = Exchange::kAuto;
  int micro_batch = 0;
  int slice = 0;  // images per member per step
  float momentum = 0, weight_decay = 0;
  SplitShares split;  // the shared exchange's split layers (backend.h)
  double timeout_s = 300;  // the shared exchange: a wait for a peer this long is an error
  int powersgd_rank = 0;   // > 0: the allreduce exchange compresses Dense gradients (powersgd.h)
  bool powersgd_alternate = false;  // ... alternating (ACP-SGD)
  std::size_t bucket_floats = 0;  // > 0: the allreduce exchange overlaps buckets with backward
};

class CpuExchange {
 public:
  virtual ~CpuExchange() = default;
  // "allreduce", "hierarchical", "overlap", "powersgd", "acp-sgd" or "shared": the epoch line's
  // and the report's `exchange`
  virtual const char* name() const = 0;
  virtual std::string summary() const = 0;  // the end of the "training:" line
  // Whether the members run Model::forward_backward_deferred (the Dense layers' dW deferred).
  virtual bool deferred() const = 0;
  virtual bool fused() const { return false; }
  // What the rank's model is told as backward finishes each layer (Model::forward_backward's
  // `ready`), or nullptr: the allreduce exchange with buckets starts their sums there.
  virtual const Model::GradReady* ready_hook() { return nullptr; }
  // What worker w of this rank passes to Model::forward_backward_deferred (nullptr: nothing) in
  // a step whose learning rate is lr.
  virtual DeferredPeers* peers(int worker, float lr) {
    (void)worker, (void)lr;
    return nullptr;
  }
  // The parts of the gradient buffer (stat slots included) that the rank's workers add into
  // model 0's before combine_and_update(): all of it, or only what the exchange sums.
  virtual const std::vector<Layer::Range>& summed() const = 0;
  virtual const float* velocity() const = 0;  // nullptr without momentum
  // Collective: rank 0's parameters and momentum (nullptr: zero) become every rank's.
  virtual void set_state(const float* params, const float* velocity) = 0;
  // Collective: combine model 0's gradient buffer (its stat slots then hold the sums over all
  // ranks) and step the parameters with learning rate lr, 1/members folded in.
  virtual void combine_and_update(float lr, WorkerPool& pool) = 0;
  double seconds() const { return seconds_; }  // spent combining, so far
  // Bytes a rank hands to collectives across ranks each step (0: none leave the node).
  virtual std::size_t bytes_per_step() const = 0;
  // What it would hand to the collectives across nodes each step, at any world size
  // (BackendInfo::wire_bytes_per_step): by default bytes_per_step().
  virtual std::size_t wire_bytes_per_step() const { return bytes_per_step(); }
  // BackendInfo::compression: "none", "powersgd:R" or "acp:R".
  virtual std::string compression() const { return "none"; }
  virtual std::string note() const { return ""; }  // Backend::epoch_note

 protected:
  double seconds_ = 0;
};

// One SGD step (sgd.h) on n parameters whose gradients are `grads`; grad_scale 1/members.
void sgd_piece(const ExchangeSetup& setup, int members, float lr, float* params,
               const float* grads, float* velocity, std::size_t n);
// The same on parameters [lo, hi) of the flat buffers.
void sgd_range(const ExchangeSetup& setup, int members, float lr, float* params, const float* grads,
               float* velocity, std::size_t lo, std::size_t hi);

// The exchange `setup.requested` asks for (auto: shared when the ranks share a node and no
// micro-batching is asked for, else allreduce, saying why on `log`). Binds the models'
// parameters where the exchange keeps them; models[1..] then share model 0's.
std::unique_ptr<CpuExchange> make_exchange(ProcessGroup& pg,
                                           std::vector<std::unique_ptr<Model>>& models,
                                           const ExchangeSetup& setup, std::ostream& log);
std::unique_ptr<CpuExchange> make_allreduce_exchange(ProcessGroup& pg,
                                                     std::vector<std::unique_ptr<Model>>& models,
                                                     const ExchangeSetup& setup);
// nullptr, with the reason in why_not, when the ranks cannot share memory.
std::unique_ptr<CpuExchange> make_shared_exchange(ProcessGroup& pg,
                                                  std::vector<std::unique_ptr<Model>>& models,
                                                  const ExchangeSetup& setup, std::string& why_not);

}  // namespace gpurun::runtime::cpu

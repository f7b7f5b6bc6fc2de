// model.h: the CPU model of a ModelSpec, trained with softmax cross-entropy. Parameters live in
// one contiguous buffer (laid out as ModelSpec says) and gradients in another; the gradient buffer
// ends with a few "stat" slots (loss sum, correct count, stop flag) so one allreduce per step
// carries everything the ranks must agree on. Activations and workspaces are allocated once, for
// max_batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cpu/buffer.h"
#include "cpu/layers.h"

namespace gpurun::runtime {

// Slots after the parameters' gradients in the gradient buffer.
enum StatSlot : std::size_t { kLossSum = 0, kCorrect = 1, kStopFlag = 2, kStatSlots = 4 };

struct StepResult {
  double loss_sum = 0;       // sum over the batch of the cross-entropy
  std::int64_t correct = 0;  // arg-max hits, measured on the logits before the update
};

// The other members of a shared-memory exchange (runtime/src/cpu/exchange_shared.cc), as one
// member's Model::forward_backward_deferred sees them.
class DeferredPeers {
 public:
  virtual ~DeferredPeers() = default;
  // Whether deferred layer k is split by columns between the members (each owns some of the
  // weight matrix's inputs). Its X, dZ and dX must then be bound (Model::bind_deferred), and
  // forward() and backward_data() below run its matrix products.
  virtual bool split(std::size_t k) const = 0;
  // X W^T of layer k for this member's images, into z, from every member's partial sum; waits
  // for every member's X.
  virtual void forward(std::size_t k, float* z) = 0;
  // The columns of dX this member owns, for every member's images, from every member's dZ;
  // returns once every member's columns are written (the bound dX is then complete).
  virtual void backward_data(std::size_t k) = 0;
  // Runs once the step has read the deferred layers' weights for the last time and written
  // their X and dZ: from then on other members may update those weights.
  virtual void released() = 0;
  // Whether deferred layer k's weights take their step inside backward: block by block, each
  // block stepped right after its columns of dX are formed from it, while it is in cache (one
  // member alone, whom no one else's step waits for). Its backward then forms only dZ and calls
  // backward_and_update(k, dx), which writes dX (when dx is not null) and steps the weights.
  virtual bool updates_in_backward(std::size_t k) const {
    (void)k;
    return false;
  }
  virtual void backward_and_update(std::size_t k, float* dx) {
    (void)k, (void)dx;
    throw std::logic_error("deferred peers: no update inside backward");
  }
  // Whether the first layer splits by output channels along with a split Dense layer right
  // after it (Layer::output_unit): then the model's input must be bound (Model::bind_input),
  // and forward_first() and backward_first() run that layer: this member's columns of its
  // output for every member's images, and its parameter gradient from those columns.
  virtual bool split_first() const { return false; }
  virtual void forward_first() {}
  virtual void backward_first() {}
};

class Model {
 public:
  // The classes are the last layer's outputs; throws std::invalid_argument for an empty model.
  Model(const ModelSpec& spec, int max_batch);

  // ModelSpec::init_params into this model's parameters.
  void init(std::uint64_t seed);
  // Makes this model a replica of `owner` for intra-process data parallelism: its layers read
  // owner's parameters; gradients, activations and workspaces stay its own. Shapes must match.
  void share_params(Model& owner);

  // Forward + backward on one batch: overwrites the gradient buffer with d(mean loss)/dparams
  // for this batch, writes loss sum and correct count into the stat slots. With micro_batch > 0
  // (it must divide batch) the batch runs as consecutive micro-batches whose gradients are
  // accumulated: less activation memory, and the same partial sums, added in the same order, as
  // batch/micro_batch ranks of micro_batch images each would allreduce.
  //
  // `ready`, when given, runs the last micro-batch's backward in pieces (Layer::
  // backward_in_pieces): ready.ready(from) is told that the parameters' gradients from `from` to
  // the end are final, and ready.progress() is called between pieces that finish none. The
  // allreduce exchange starts summing them while backward goes on (--bucket-mb).
  struct GradReady {
    std::function<void(std::size_t from)> ready;
    std::function<void()> progress;
  };
  StepResult forward_backward(int batch, const float* x, const std::int32_t* labels,
                              int micro_batch = 0, const GradReady* ready = nullptr);
  // The deferred weight gradient (see Layer::backward_deferred): the layers that can defer dW,
  // in order, with where their weight matrix sits in the parameter buffer.
  struct Deferred {
    std::size_t layer = 0;   // index in layers()
    std::size_t offset = 0;  // of the weight matrix in the parameter (and gradient) buffer
    int rows = 0, in = 0;    // the matrix is rows x in
  };
  const std::vector<Deferred>& deferred() const { return deferred_; }
  // The parameter ranges outside the deferred weight matrices (biases, the convolution): the
  // part of the gradient buffer forward_backward_deferred() writes.
  std::vector<Layer::Range> undeferred_ranges() const;
  // Where deferred layer k's input X (batch x in floats), its dZ (batch x rows) and dX, the
  // gradient at X (batch x in; only for a split layer: splittable() below) live during
  // forward_backward_deferred(): the trainer points them into memory the ranks share, so any
  // rank can form any columns of dW from everybody's activations. Each must hold `batch` images.
  void bind_deferred(std::size_t k, float* x, float* dz, float* dx = nullptr);
  // Whether deferred layer k can be split by columns: it has a dX of its own (it is not the
  // first layer) and its dX is not the previous deferred layer's dZ.
  bool splittable(std::size_t k) const;
  // Where forward_backward_deferred() copies its input batch, for peers that split the first
  // layer (DeferredPeers::split_first); a deferred first layer binds it too (its X).
  void bind_input(float* x) { bound_input_ = x; }
  // The first layer's output columns per channel when it can split (Layer::output_unit), or 0;
  // and its split forward and backward (Layer::forward_cols, backward_params_cols) on `batch`
  // images one after another, into this model's gradient buffer.
  int first_layer_unit() const { return layers_.front()->output_unit(); }
  void first_forward_cols(int batch, const float* x, int lo, int hi, float* y);
  void first_backward_cols(int batch, const float* x, const float* y, float* dy, int lo, int hi);
  // Forward + backward with every deferrable layer deferring dW: writes the undeferred ranges of
  // the gradient buffer, the stat slots, and X and dZ of each deferred layer at the bound
  // addresses (or in the model's own activations when none is bound). With `peers`, the layers
  // they split run their products through them, and peers->released() runs once the step has
  // read the deferred layers' weights for the last time and written their X and dZ (after the
  // first deferred layer's backward).
  StepResult forward_backward_deferred(int batch, const float* x, const std::int32_t* labels,
                                       DeferredPeers* peers = nullptr);
  // Columns [lo, hi) of deferred layer k's weight matrix in `buffer` (params() or grads()):
  // c = beta c + alpha dZ^T X over `batch` images whose X and dZ lie one after another.
  void deferred_weight_cols(std::size_t k, int batch, const float* x, const float* dz, int lo,
                            int hi, float alpha, float beta, float* buffer) const;
  // The products of a split layer (Layer::product_cols, input_grad_cols) on deferred layer k's
  // columns [lo, hi), for `batch` images one after another.
  void deferred_product_cols(std::size_t k, int batch, const float* x, int lo, int hi,
                             float* y) const;
  void deferred_input_grad_cols(std::size_t k, int batch, const float* dz, int lo, int hi,
                                float* dx) const;
  // Moves the parameters to caller-owned memory of param_floats() floats (shared memory in the
  // trainer); the contents are not copied. The memory must outlive the model.
  void use_param_storage(float* params);
  // Forward only; returns loss sum and correct count.
  StepResult evaluate(int batch, const float* x, const std::int32_t* labels);

  float* params() { return param_base_; }
  const float* params() const { return param_base_; }
  std::size_t param_floats() const { return n_params_; }           // including alignment padding
  std::size_t param_count() const { return spec_.param_count(); }  // 2,770,634 for the MNIST CNN
  float* grads() { return grads_.data(); }
  // Gradients followed by kStatSlots floats: the buffer a step allreduces.
  std::size_t grad_buffer_floats() const { return n_params_ + kStatSlots; }
  float* stats() { return grads_.data() + n_params_; }

  const ModelSpec& spec() const { return spec_; }
  int max_batch() const { return max_batch_; }
  int classes() const { return classes_; }
  Shape input_shape() const { return layers_.front()->input_shape(); }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  // With `bound`, the activations of deferred layers go to their bound addresses; the layers
  // `peers` split run their products through them.
  void run_forward(int batch, const float* x, bool bound, DeferredPeers* peers = nullptr);
  // Layer i's backward in pieces (forward_backward's `ready`), its offsets made the buffer's.
  void backward_in_pieces(std::size_t i, int batch, const float* x, float* dx, InputGrad need,
                          kernels::Accumulate acc, kernels::Workspace ws, const GradReady& ready);
  // The deferred index k of layer i: when it is one; when `peers` split it; when `peers` step
  // its weights inside backward.
  std::optional<std::size_t> deferred_index(std::size_t i) const;
  std::optional<std::size_t> split_index(std::size_t i, const DeferredPeers* peers) const;
  std::optional<std::size_t> stepped_index(std::size_t i, const DeferredPeers* peers) const;
  float* act(std::size_t i, bool bound) {
    return bound && bound_act_[i] ? bound_act_[i] : acts_[i].data();
  }
  float* dact(std::size_t i, bool bound) {
    return bound && bound_dact_[i] ? bound_dact_[i] : dacts_[i].data();
  }
  void bind_layers(float* params);
  // The stat slots after a training step: its loss sum and correct count, no stop flag.
  void write_stats(const StepResult& r);

  ModelSpec spec_;
  std::vector<std::unique_ptr<Layer>> layers_;
  int classes_, max_batch_;
  std::size_t n_params_ = 0;
  FloatBuffer params_, grads_;
  std::vector<FloatBuffer> acts_;   // acts_[i] = output of layer i
  std::vector<FloatBuffer> dacts_;  // gradient w.r.t. acts_[i]
  FloatBuffer workspace_;
  FloatBuffer dlogits_;
  std::vector<Deferred> deferred_;
  std::vector<float*> bound_act_, bound_dact_;  // per layer; nullptr: the model's own buffer
  float* bound_input_ = nullptr;                // when layer 0 defers, its X must be copied here
  float* param_base_ = nullptr;                 // where the layers' parameters are bound
};

}  // namespace gpurun::runtime

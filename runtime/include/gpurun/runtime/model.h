// model.h: a sequential classifier trained with softmax cross-entropy. Parameters live in one
// contiguous buffer and gradients in another; the gradient buffer ends with a few "stat" slots
// (loss sum, correct count, stop flag) so one allreduce per step carries everything the ranks must
// agree on. Activations and workspaces are allocated once, for max_batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gpurun/runtime/buffer.h"
#include "gpurun/runtime/layers.h"

namespace gpurun::runtime {

// Slots after the parameters' gradients in the gradient buffer.
enum StatSlot : std::size_t { kLossSum = 0, kCorrect = 1, kStopFlag = 2, kStatSlots = 4 };

struct StepResult {
  double loss_sum = 0;       // sum over the batch of the cross-entropy
  std::int64_t correct = 0;  // arg-max hits, measured on the logits before the update
};

class Model {
 public:
  Model(std::vector<std::unique_ptr<Layer>> layers, int classes, int max_batch);

  // Glorot/zero initialisation from a seed (all ranks can do it; rank 0's copy is broadcast).
  void init(std::uint64_t seed);
  // Makes this model a replica of `owner` for intra-process data parallelism: its layers read
  // owner's parameters; gradients, activations and workspaces stay its own. Shapes must match.
  void share_params(Model& owner);

  // Forward + backward on one batch: overwrites the gradient buffer with d(mean loss)/dparams
  // for this batch, writes loss sum and correct count into the stat slots. With micro_batch > 0
  // (it must divide batch) the batch runs as consecutive micro-batches whose gradients are
  // accumulated: less activation memory, and the same partial sums, added in the same order, as
  // batch/micro_batch ranks of micro_batch images each would allreduce.
  StepResult forward_backward(int batch, const float* x, const std::int32_t* labels,
                              int micro_batch = 0);
  // One rank, one replica, plain SGD: forward + backward in which the fusable weight matrices
  // (the Dense layers') take their SGD step inside the gradient sgemm, w += alpha * dL/dw with
  // alpha = -lr. The other parameters' gradients are written as usual and are the caller's to
  // apply: fused_ranges() says which parts of the gradient buffer this leaves unwritten.
  StepResult forward_backward_fused(int batch, const float* x, const std::int32_t* labels,
                                    float alpha);
  std::vector<Layer::Range> fused_ranges() const;
  // Forward only; returns loss sum and correct count.
  StepResult evaluate(int batch, const float* x, const std::int32_t* labels);

  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  std::size_t param_floats() const { return n_params_; }  // including alignment padding
  std::size_t param_count() const;  // real parameters (2,770,634 for MNIST CNN)
  float* grads() { return grads_.data(); }
  // Gradients followed by kStatSlots floats: the buffer a step allreduces.
  std::size_t grad_buffer_floats() const { return n_params_ + kStatSlots; }
  float* stats() { return grads_.data() + n_params_; }

  int max_batch() const { return max_batch_; }
  int classes() const { return classes_; }
  Shape input_shape() const { return layers_.front()->input_shape(); }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  void run_forward(int batch, const float* x);

  std::vector<std::unique_ptr<Layer>> layers_;
  int classes_, max_batch_;
  std::size_t n_params_ = 0;
  FloatBuffer params_, grads_;
  std::vector<FloatBuffer> acts_;   // acts_[i] = output of layer i
  std::vector<FloatBuffer> dacts_;  // gradient w.r.t. acts_[i]
  FloatBuffer workspace_;
  FloatBuffer dlogits_;
};

// The benchmark's network: Conv2D(32, 3x3) + ReLU -> Flatten -> Dense(128) + ReLU ->
// Dense(classes).
std::unique_ptr<Model> make_mnist_cnn(Shape input, int classes, int max_batch);

}  // namespace gpurun::runtime

// device_model.h (private): a ModelSpec on one GPU. The parameters, gradients and momentum live in
// flat device buffers laid out exactly as ModelSpec says (so checkpoints are the CPU model's), and
// every layer of the spec becomes its cuda:: ops (cuDNN convolutions, cuBLAS matrix products, the
// bias/activation, pooling and loss kernels) enqueued on a stream. Nothing here synchronises or
// allocates after construction, so a whole step can be captured in a CUDA Graph.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "gpurun/cuda_support/owners.h"
#include "gpurun/kernels/types.h"
#include "gpurun/runtime/model_spec.h"

namespace gpurun::runtime::cuda {

using cuda_support::DeviceBuffer;

class DeviceModel {
 public:
  // Activations for up to max(batch, eval_batch) images; `momentum` allocates the velocity. Every
  // buffer is zeroed on `owner`, the stream the model's work is enqueued on.
  DeviceModel(const ModelSpec& spec, int batch, int eval_batch, bool momentum, cudaStream_t owner);

  const ModelSpec& spec() const { return spec_; }
  float* params() const { return params_.get(); }
  float* grads() const { return grads_.get(); }
  float* velocity() const { return velocity_.get(); }  // nullptr without momentum
  std::size_t param_floats() const { return spec_.param_floats(); }
  int max_batch() const { return max_batch_; }              // images the activation buffers hold
  float* input() const { return x_.get(); }                 // batch x input floats
  std::int32_t* labels() const { return y_.get(); }         // batch labels
  float* loss() const { return loss_.get(); }               // one float: the last batch's loss sum
  std::int64_t* correct() const { return correct_.get(); }  // one int64: its arg-max hits

  // Forward through every layer on `b` images of input(); then the loss sum into loss() and the
  // arg-max hits into correct(). With grad_scale > 0 the logits' gradient (grad_scale x
  // (softmax - onehot)) is formed too, ready for backward().
  void forward_loss(int b, float grad_scale, kernels::Stream s) const;
  // Backward from the logits' gradient: the gradient buffer gets d(loss)/dparams (overwritten).
  // The first layer's input gradient is never formed. `ready`, when given, is called after each
  // layer with parameters once its kernels are enqueued on s: the gradients from `from` to the
  // end are then final once s gets there (--bucket-mb starts their sums there).
  using GradReady = std::function<void(std::size_t from)>;
  void backward(int b, kernels::Stream s, const GradReady& ready = {}) const;

 private:
  void forward_layer(std::size_t i, int b, kernels::Stream s) const;
  void backward_layer(std::size_t i, int b, kernels::Stream s) const;
  const float* layer_input(std::size_t i) const { return i == 0 ? x_.get() : act_[i - 1]; }
  float* weights(std::size_t i) const { return params_.get() + spec_.params_of(i).weights; }
  float* bias(std::size_t i) const { return params_.get() + spec_.params_of(i).bias; }
  float* dweights(std::size_t i) const { return grads_.get() + spec_.params_of(i).weights; }
  float* dbias(std::size_t i) const { return grads_.get() + spec_.params_of(i).bias; }
  kernels::Workspace ws() const { return {ws_.get(), ws_.size()}; }

  ModelSpec spec_;
  int max_batch_;
  DeviceBuffer<float> params_, grads_, velocity_;
  DeviceBuffer<float> x_;
  DeviceBuffer<std::int32_t> y_;
  std::vector<DeviceBuffer<float>> act_buf_, dact_buf_;
  std::vector<float*> act_, dact_;  // per layer; Flatten aliases its input's buffers
  DeviceBuffer<float> loss_;
  DeviceBuffer<std::int64_t> correct_;
  DeviceBuffer<float> ws_;
};

}  // namespace gpurun::runtime::cuda

// layers.h: the layers of a sequential model on the CPU. A layer owns no parameter memory: the
// model binds it to a slice of one flat parameter buffer and the same slice of one flat gradient
// buffer, so the whole gradient is a single allreduce.
#pragma once

#include <memory>
#include <string>

#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/types.h"
#include "gpurun/runtime/rng.h"

namespace gpurun::runtime {

// Per-example activation shape, channels x height x width (a flat vector is {n, 1, 1}).
struct Shape {
  int c = 1, h = 1, w = 1;
  std::size_t size() const { return std::size_t(c) * h * w; }
  bool operator==(const Shape& o) const { return c == o.c && h == o.h && w == o.w; }
};

// Whether backward() must produce the gradient with respect to the layer's input. The first layer
// does not need it, which saves a full convolution backward pass.
enum class InputGrad { kSkip, kCompute };

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string name() const = 0;
  virtual Shape input_shape() const = 0;
  virtual Shape output_shape() const = 0;
  // Parameter tensors are laid out one after another; offsets are multiples of kParamAlign floats.
  virtual std::size_t param_floats() const = 0;
  virtual void bind(float* params, float* grads) = 0;
  // Glorot-uniform weights and zero biases, as Keras initialises Conv2D and Dense.
  virtual void init(Rng& rng) = 0;
  virtual std::size_t workspace_floats(int batch) const = 0;
  virtual void forward(int batch, const float* x, float* y, kernels::Workspace ws) = 0;
  // y is forward's output; dy (dL/dy) is overwritten with scratch; parameter gradients go to the
  // bound slice, overwriting it or (kAdd, micro-batch accumulation) adding this batch's sum to it.
  virtual void backward(int batch, const float* x, const float* y, float* dy, float* dx,
                        InputGrad need, kernels::Accumulate acc, kernels::Workspace ws) = 0;
  // Fused SGD (one rank, one replica, plain SGD): backward adds alpha * dL/dW straight into the
  // weight matrix inside its sgemm (alpha = -lr), after using the old weights for dx, instead of
  // writing dW for a separate SGD pass. Layers that cannot return an empty range.
  struct Range {
    std::size_t begin = 0, end = 0;  // offsets in the layer's parameter slice
  };
  virtual Range fusable_weights() const { return {}; }
  virtual void backward_fused(int batch, const float* x, const float* y, float* dy, float* dx,
                              InputGrad need, float alpha, kernels::Workspace ws) {
    (void)alpha;
    backward(batch, x, y, dy, dx, need, kernels::Accumulate::kOverwrite, ws);
  }
};

constexpr std::size_t kParamAlign = 16;  // floats: 64-byte aligned parameter tensors

// Conv2D (stride 1, no padding, like Keras's default "valid") + bias + activation.
std::unique_ptr<Layer> make_conv2d(Shape in, int out_channels, int kernel, kernels::Activation act);
// Dense + bias + activation; flattens its input.
std::unique_ptr<Layer> make_dense(Shape in, int out, kernels::Activation act);

}  // namespace gpurun::runtime

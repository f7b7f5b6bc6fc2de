// layers.h: the CPU implementation of each layer of a ModelSpec (model_spec.h). A layer owns no
// parameter memory: the model binds it to its slice of one flat parameter buffer and the same
// slice of one flat gradient buffer, so the whole gradient is a single allreduce.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpurun/kernels/types.h"
#include "gpurun/runtime/model_spec.h"

namespace gpurun::runtime {

// Whether backward() must produce the gradient with respect to the layer's input. The first layer
// does not need it, which saves a full convolution backward pass.
enum class InputGrad { kSkip, kCompute };

class Layer {
 public:
  virtual ~Layer() = default;
  explicit Layer(const LayerSpec& spec) : spec_(spec) {}
  const LayerSpec& spec() const { return spec_; }
  std::string name() const { return spec_.name(); }
  Shape input_shape() const { return spec_.input; }
  Shape output_shape() const { return spec_.output; }
  // The layer's slice of the flat buffers (ModelSpec::params_of); layers without parameters
  // ignore the call.
  virtual void bind(float* params, float* grads) { (void)params, (void)grads; }
  virtual std::size_t workspace_floats(int batch) const = 0;
  virtual void forward(int batch, const float* x, float* y, kernels::Workspace ws) = 0;
  // y is forward's output; dy (dL/dy) is overwritten with scratch; parameter gradients go to the
  // bound slice, overwriting it or (kAdd, micro-batch accumulation) adding this batch's sum to it.
  virtual void backward(int batch, const float* x, const float* y, float* dy, float* dx,
                        InputGrad need, kernels::Accumulate acc, kernels::Workspace ws) = 0;
  // backward() in pieces, so that the allreduce sums a piece of the gradient while backward
  // computes the next (--bucket-mb); the same bits as backward(). ready(from): the layer's
  // parameter gradients from `from` (an offset in its slice) to the slice's end are final.
  // progress(): called between pieces that finish no gradient (the input gradient's). The
  // default: backward(), then ready(0).
  struct Pieces {
    std::function<void(std::size_t from)> ready;
    std::function<void()> progress;
  };
  virtual void backward_in_pieces(int batch, const float* x, const float* y, float* dy, float* dx,
                                  InputGrad need, kernels::Accumulate acc, kernels::Workspace ws,
                                  const Pieces& pieces) {
    backward(batch, x, y, dy, dx, need, acc, ws);
    pieces.ready(0);
  }
  // The deferred weight gradient (Dense layers). backward_deferred() does all of backward()
  // except dW: it leaves dZ, the gradient at the pre-activation, in dy (batch x rows), and dx.
  // weight_cols() later forms columns [lo, hi) of dZ^T X into c, the layer's weight matrix in the
  // parameter buffer (c = beta c + alpha dZ^T X: beta 1, alpha = -lr/N is the SGD step fused into
  // the sgemm) or in the gradient buffer (beta 0). X and dZ may be several ranks' batches one
  // after another. The trainer uses this to update the weights by columns from every
  // rank's activations in shared memory instead of allreducing the 11 MB dW. Layers that cannot
  // defer return an empty range.
  struct Range {
    std::size_t begin = 0, end = 0;  // offsets in the layer's parameter slice
  };
  virtual Range deferred_weights() const { return {}; }
  virtual int deferred_rows() const { return 0; }
  virtual void backward_deferred(int batch, const float* x, const float* y, float* dy, float* dx,
                                 InputGrad need, kernels::Workspace ws) {
    (void)batch, (void)x, (void)y, (void)dy, (void)dx, (void)need, (void)ws;
    throw std::logic_error(name() + ": no deferred weight gradient");
  }
  virtual void weight_cols(int batch, const float* x, const float* dz, int lo, int hi, float alpha,
                           float beta, float* c) const {
    (void)batch, (void)x, (void)dz, (void)lo, (void)hi, (void)alpha, (void)beta, (void)c;
    throw std::logic_error(name() + ": no deferred weight gradient");
  }
  // A deferred layer's products split by columns between ranks (each owns inputs [lo, hi) of
  // the weight matrix and never touches the rest):
  //   product_cols:    y = X[:, lo:hi] W[:, lo:hi]^T, one partial sum of forward's product;
  //   finish_forward:  the rest of forward (bias, activation) once y holds the whole product;
  //   input_grad_cols: dx[:, lo:hi] = dZ W[:, lo:hi].
  virtual void product_cols(int batch, const float* x, int lo, int hi, float* y) const {
    (void)batch, (void)x, (void)lo, (void)hi, (void)y;
    throw std::logic_error(name() + ": no deferred weight gradient");
  }
  virtual void finish_forward(int batch, float* y) const {
    (void)batch, (void)y;
    throw std::logic_error(name() + ": no deferred weight gradient");
  }
  virtual void input_grad_cols(int batch, const float* dz, int lo, int hi, float* dx) const {
    (void)batch, (void)dz, (void)lo, (void)hi, (void)dx;
    throw std::logic_error(name() + ": no deferred weight gradient");
  }
  // A first layer whose output splits by channels along with the split Dense layer after it
  // (a convolution: each member computes its own channels, for every member's images, so the
  // X it owns never comes from another core). output_unit() is the output columns per channel
  // (0: the layer cannot split); [lo, hi) are multiples of it.
  //   forward_cols:         y[:, lo:hi] for `batch` images;
  //   backward_params_cols: the layer's parameter gradient from those columns alone (the other
  //                         channels' gradient is zero), overwriting its gradient slice; dy's
  //                         columns are left masked by the activation's derivative.
  // Each channel's values are the same bits whatever lo and hi are, so a split's result does
  // not depend on where its boundaries fall.
  virtual int output_unit() const { return 0; }
  virtual void forward_cols(int batch, const float* x, int lo, int hi, float* y,
                            kernels::Workspace ws) const {
    (void)batch, (void)x, (void)lo, (void)hi, (void)y, (void)ws;
    throw std::logic_error(name() + ": cannot split its output");
  }
  virtual void backward_params_cols(int batch, const float* x, const float* y, float* dy, int lo,
                                    int hi, kernels::Workspace ws) {
    (void)batch, (void)x, (void)y, (void)dy, (void)lo, (void)hi, (void)ws;
    throw std::logic_error(name() + ": cannot split its output");
  }

 private:
  LayerSpec spec_;
};

// The CPU layer for one entry of a ModelSpec (its input and output shapes set).
std::unique_ptr<Layer> make_layer(const LayerSpec& spec);

}  // namespace gpurun::runtime

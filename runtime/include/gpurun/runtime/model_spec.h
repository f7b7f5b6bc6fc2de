// model_spec.h: a sequential model as data the caller builds. A ModelSpec is an input shape and a
// list of layers (Conv2D, Dense, ReLU, Flatten, MaxPool2D); adding a layer works out its output
// shape and refuses what does not fit. Both backends build their step from this list (the CPU
// Model, model.h; the CUDA backend's device layers), and both lay the parameters out the same way
// in one flat buffer, so checkpoints are interchangeable:
//   ModelSpec net({1, 28, 28});
//   net.add(conv2d(32, 3, Activation::kRelu)).add(flatten()).add(dense(128, Activation::kRelu))
//      .add(dense(10));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpurun/kernels/bias_act.h"

namespace gpurun::runtime {

using kernels::Activation;

// Per-example activation shape, channels x height x width (a flat vector is {n, 1, 1}).
struct Shape {
  int c = 1, h = 1, w = 1;
  std::size_t size() const { return std::size_t(c) * h * w; }
  bool operator==(const Shape& o) const { return c == o.c && h == o.h && w == o.w; }
};

enum class LayerKind { kConv2D, kDense, kReLU, kFlatten, kMaxPool2D };

struct LayerSpec {
  LayerKind kind = LayerKind::kDense;
  int units = 0;   // Conv2D: filters; Dense: outputs
  int kernel = 0;  // Conv2D: kernel size; MaxPool2D: window size (square)
  int stride = 0;  // MaxPool2D: stride (the window size when 0, as in Keras)
  Activation activation = Activation::kNone;  // Conv2D and Dense: fused after the bias
  Shape input, output;                        // set by ModelSpec::add

  const char* name() const;  // "conv2d", "dense", "relu", "flatten", "max_pool2d"
  bool has_params() const { return kind == LayerKind::kConv2D || kind == LayerKind::kDense; }
  std::size_t weight_floats() const;  // the weight matrix or kernel, unpadded; 0 without params
  std::size_t bias_floats() const;
  std::size_t macs() const;  // multiply-adds of one example's forward; 0 without params
};

// Conv2D: stride 1, no padding ("valid"), `filters` output channels, a kernel x kernel window.
LayerSpec conv2d(int filters, int kernel, Activation act = Activation::kNone);
// Dense (fully connected; flattens its input).
LayerSpec dense(int units, Activation act = Activation::kNone);
LayerSpec relu();
LayerSpec flatten();
LayerSpec max_pool2d(int size, int stride = 0);

// Parameter tensors are laid out one after another, each padded to kParamAlign floats (64 bytes).
inline constexpr std::size_t kParamAlign = 16;

// Where one layer's tensors sit in the flat parameter buffer (and the same place in the gradient
// buffer). Layers without parameters have empty slices.
struct ParamSlice {
  std::size_t offset = 0;             // of the layer's first tensor
  std::size_t floats = 0;             // the layer's whole slice, padding included
  std::size_t weights = 0, bias = 0;  // offsets of the two tensors
};

class ModelSpec {
 public:
  explicit ModelSpec(Shape input);
  // Appends a layer; throws std::invalid_argument naming the layer (its position and kind) and
  // the shapes when it cannot follow the previous one.
  ModelSpec& add(LayerSpec layer);

  Shape input() const { return input_; }
  Shape output() const { return layers_.empty() ? input_ : layers_.back().output; }
  const std::vector<LayerSpec>& layers() const { return layers_; }
  const ParamSlice& params_of(std::size_t layer) const { return slices_.at(layer); }
  std::size_t param_floats() const { return param_floats_; }  // including padding
  std::size_t param_count() const;                            // trainable values only
  // FLOP (2 per multiply-add) of one example's training step in the convolutions and matrix
  // products: the forward, the weights' gradients, and the input gradients of every layer with
  // parameters before it (the first such layer's is never formed). Elementwise work (bias,
  // activations, pooling, loss, update) is not counted. 17,399,808 for the MNIST CNN.
  double train_flops_per_example() const;

  // Glorot-uniform weights and zero biases (Keras' defaults) from `seed` into `params`
  // (param_floats() floats; padding zeroed). The same seed gives the same weights everywhere.
  void init_params(std::uint64_t seed, float* params) const;
  // One line per layer: "conv2d 3x3 relu  1x28x28 -> 32x26x26  320 params".
  std::string summary() const;

 private:
  Shape input_;
  std::vector<LayerSpec> layers_;
  std::vector<ParamSlice> slices_;
  std::size_t param_floats_ = 0;
};

}  // namespace gpurun::runtime

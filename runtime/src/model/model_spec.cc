// model_spec.cc: layer shapes, the flat parameter layout and initial weights (model_spec.h).
#include "gpurun/runtime/model_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "model/rng.h"

namespace gpurun::runtime {
namespace {

std::size_t aligned(std::size_t n) {
  return (n + kParamAlign - 1) / kParamAlign * kParamAlign;
}

std::string shape_text(Shape s) {
  return std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

[[noreturn]] void refuse(std::size_t index, const LayerSpec& l, const std::string& why) {
  throw std::invalid_argument("model: layer " + std::to_string(index + 1) + " (" + l.name() +
                              ") on input " + shape_text(l.input) + ": " + why);
}

// The output shape of `l` on its input; refuses what cannot work.
Shape output_of(std::size_t index, const LayerSpec& l) {
  const Shape in = l.input;
  switch (l.kind) {
    case LayerKind::kConv2D:
      if (l.units < 1 || l.kernel < 1) refuse(index, l, "filters and kernel must be >= 1");
      if (l.kernel > in.h || l.kernel > in.w) {
        refuse(index, l,
               "a " + std::to_string(l.kernel) + "x" + std::to_string(l.kernel) +
                   " kernel does not fit");
      }
      return {l.units, in.h - l.kernel + 1, in.w - l.kernel + 1};
    case LayerKind::kDense:
      if (l.units < 1) refuse(index, l, "units must be >= 1");
      return {l.units, 1, 1};
    case LayerKind::kMaxPool2D:
      if (l.kernel < 1 || l.stride < 1) refuse(index, l, "size and stride must be >= 1");
      if (l.kernel > in.h || l.kernel > in.w) {
        refuse(index, l,
               "a " + std::to_string(l.kernel) + "x" + std::to_string(l.kernel) +
                   " window does not fit");
      }
      return {in.c, (in.h - l.kernel) / l.stride + 1, (in.w - l.kernel) / l.stride + 1};
    case LayerKind::kReLU:
      return in;
    case LayerKind::kFlatten:
      return {int(in.size()), 1, 1};
  }
  refuse(index, l, "unknown layer kind");
}

void glorot(Rng& rng, float* w, std::size_t n, double fan_in, double fan_out) {
  const float limit = float(std::sqrt(6.0 / (fan_in + fan_out)));
  for (std::size_t i = 0; i < n; ++i) w[i] = rng.uniform(-limit, limit);
}

}  // namespace

const char* LayerSpec::name() const {
  switch (kind) {
    case LayerKind::kConv2D:
      return "conv2d";
    case LayerKind::kDense:
      return "dense";
    case LayerKind::kReLU:
      return "relu";
    case LayerKind::kFlatten:
      return "flatten";
    case LayerKind::kMaxPool2D:
      return "max_pool2d";
  }
  return "?";
}

std::size_t LayerSpec::weight_floats() const {
  if (kind == LayerKind::kConv2D) return std::size_t(units) * input.c * kernel * kernel;
  if (kind == LayerKind::kDense) return std::size_t(units) * input.size();
  return 0;
}

std::size_t LayerSpec::bias_floats() const {
  return has_params() ? std::size_t(units) : 0;
}

std::size_t LayerSpec::macs() const {
  // A kernel's weights meet every output position; a dense layer's meet the input once.
  if (kind == LayerKind::kConv2D) return weight_floats() * output.h * output.w;
  return weight_floats();
}

LayerSpec conv2d(int filters, int kernel, Activation act) {
  LayerSpec l;
  l.kind = LayerKind::kConv2D;
  l.units = filters;
  l.kernel = kernel;
  l.activation = act;
  return l;
}

LayerSpec dense(int units, Activation act) {
  LayerSpec l;
  l.kind = LayerKind::kDense;
  l.units = units;
  l.activation = act;
  return l;
}

LayerSpec relu() {
  LayerSpec l;
  l.kind = LayerKind::kReLU;
  return l;
}

LayerSpec flatten() {
  LayerSpec l;
  l.kind = LayerKind::kFlatten;
  return l;
}

LayerSpec max_pool2d(int size, int stride) {
  LayerSpec l;
  l.kind = LayerKind::kMaxPool2D;
  l.kernel = size;
  l.stride = stride == 0 ? size : stride;
  return l;
}

ModelSpec::ModelSpec(Shape input) : input_(input) {
  if (input.c < 1 || input.h < 1 || input.w < 1) {
    throw std::invalid_argument("model: input shape " + shape_text(input) + " must be positive");
  }
}

ModelSpec& ModelSpec::add(LayerSpec layer) {
  layer.input = output();
  layer.output = output_of(layers_.size(), layer);
  ParamSlice s;
  s.offset = s.weights = param_floats_;
  s.bias = s.weights + aligned(layer.weight_floats());
  s.floats = aligned(layer.weight_floats()) + aligned(layer.bias_floats());
  param_floats_ += s.floats;
  layers_.push_back(layer);
  slices_.push_back(s);
  return *this;
}

std::size_t ModelSpec::param_count() const {
  std::size_t n = 0;
  for (const LayerSpec& l : layers_) n += l.weight_floats() + l.bias_floats();
  return n;
}

double ModelSpec::train_flops_per_example() const {
  double flops = 0;
  bool params_before = false;
  for (const LayerSpec& l : layers_) {
    const double pass = 2.0 * double(l.macs());
    flops += pass + pass + (params_before ? pass : 0.0);  // forward, dW, dX
    params_before = params_before || l.has_params();
  }
  return flops;
}

void ModelSpec::init_params(std::uint64_t seed, float* params) const {
  std::fill(params, params + param_floats_, 0.0f);
  Rng rng = Rng::derive(seed, 0x1A17, 0);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const LayerSpec& l = layers_[i];
    if (!l.has_params()) continue;
    // Glorot's fans: a kernel's receptive field times its input (output) channels.
    const double field = l.kind == LayerKind::kConv2D ? double(l.kernel) * l.kernel : 1.0;
    const double fan_in = l.kind == LayerKind::kConv2D ? field * l.input.c : double(l.input.size());
    glorot(rng, params + slices_[i].weights, l.weight_floats(), fan_in, field * l.units);
  }
}

std::string ModelSpec::summary() const {
  std::string out;
  for (const LayerSpec& l : layers_) {
    char line[160];
    std::snprintf(line, sizeof line, "%-11s %-9s %-5s %9s -> %-9s %9zu params\n", l.name(),
                  l.kernel > 0 ? (std::to_string(l.kernel) + "x" + std::to_string(l.kernel)).c_str()
                               : (l.units > 0 ? std::to_string(l.units).c_str() : ""),
                  l.activation == Activation::kRelu ? "relu" : "", shape_text(l.input).c_str(),
                  shape_text(l.output).c_str(), l.weight_floats() + l.bias_floats());
    out += line;
  }
  return out;
}

}  // namespace gpurun::runtime

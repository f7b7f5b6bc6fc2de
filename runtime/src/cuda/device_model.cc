// device_model.cc: each layer kind of a ModelSpec as its cuda:: ops (device_model.h).
#include "device_model.h"

#include <algorithm>
#include <stdexcept>

#include "gpurun/kernels/accuracy.h"
#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/dense.h"
#include "gpurun/kernels/pool2d.h"
#include "gpurun/kernels/softmax_xent.h"

namespace gpurun::runtime::cuda {
namespace {

namespace k = gpurun::kernels;
namespace kc = gpurun::kernels::cuda;

k::Conv2dDesc conv_desc(const LayerSpec& l, int b) {
  k::Conv2dDesc d;
  d.batch = b;
  d.in_c = l.input.c, d.in_h = l.input.h, d.in_w = l.input.w;
  d.out_c = l.units;
  d.k_h = d.k_w = l.kernel;
  return d;
}

k::DenseDesc dense_desc(const LayerSpec& l, int b) {
  return {b, int(l.input.size()), l.units};
}

// Bias + activation over a layer's output: [b, channels, pixels per channel].
k::BiasActDesc bias_desc(const LayerSpec& l, int b) {
  return {b, l.output.c, l.output.h * l.output.w, l.activation};
}

k::Pool2dDesc pool_desc(const LayerSpec& l, int b) {
  return {b, l.input.c, l.input.h, l.input.w, l.kernel, l.stride};
}

// A ReLU layer is bias_act without a bias over the whole example.
k::BiasActDesc relu_desc(const LayerSpec& l, int b) {
  return {b, 1, int(l.input.size()), k::Activation::kRelu};
}

void copy(float* to, const float* from, std::size_t floats, k::Stream s) {
  GPURUN_CUDA_CHECK(cudaMemcpyAsync(to, from, floats * sizeof(float), cudaMemcpyDeviceToDevice,
                                    static_cast<cudaStream_t>(s.handle)));
}

}  // namespace

DeviceModel::DeviceModel(const ModelSpec& spec, int batch, int eval_batch, bool momentum,
                         cudaStream_t owner)
    : spec_(spec),
      max_batch_(std::max(batch, eval_batch)),
      params_(spec.param_floats(), owner),
      grads_(spec.param_floats(), owner),
      velocity_(momentum ? spec.param_floats() : 0, owner),
      x_(std::size_t(max_batch_) * spec.input().size(), owner),
      y_(std::size_t(max_batch_), owner),
      loss_(1, owner),
      correct_(1, owner) {
  std::size_t ws = 1;
  for (std::size_t i = 0; i < spec.layers().size(); ++i) {
    const LayerSpec& l = spec.layers()[i];
    if (l.kind == LayerKind::kFlatten) {  // the same floats under another shape: no copy
      act_.push_back(i == 0 ? x_.get() : act_[i - 1]);
      dact_.push_back(i == 0 ? nullptr : dact_[i - 1]);
      continue;
    }
    act_buf_.emplace_back(std::size_t(max_batch_) * l.output.size(), owner);
    dact_buf_.emplace_back(std::size_t(max_batch_) * l.output.size(), owner);
    act_.push_back(act_buf_.back().get());
    dact_.push_back(dact_buf_.back().get());
    // cuDNN's algorithms are benchmarked now, outside any capture; the workspace fits the
    // largest. A first layer on the direct kernels never calls cuDNN (it needs no input
    // gradient): no search for it.
    if (l.kind != LayerKind::kConv2D) continue;
    for (const int n : {batch, eval_batch}) {
      const k::Conv2dDesc d = conv_desc(l, n);
      ws = std::max(ws, i == 0 && kc::conv2d_direct(d) ? kc::conv2d_direct_workspace_floats(d)
                                                        : kc::conv2d_workspace_floats(d));
    }
  }
  if (act_buf_.empty()) throw std::invalid_argument("model: no layer with outputs of its own");
  ws_ = DeviceBuffer<float>(ws, owner);
}

void DeviceModel::forward_layer(std::size_t i, int b, k::Stream s) const {
  const LayerSpec& l = spec_.layers()[i];
  const float* in = layer_input(i);
  float* out = act_[i];
  switch (l.kind) {
    case LayerKind::kConv2D:  // one direct kernel for small filters, else cuDNN + bias_act
      kc::conv2d_bias_act_forward(conv_desc(l, b), l.activation, in, weights(i), bias(i), out,
                                  ws(), s);
      return;
    case LayerKind::kDense:
      kc::dense_forward(dense_desc(l, b), in, weights(i), out, s);
      kc::bias_act_forward(bias_desc(l, b), out, bias(i), s);
      return;
    case LayerKind::kReLU:
      copy(out, in, std::size_t(b) * l.input.size(), s);
      kc::bias_act_forward(relu_desc(l, b), out, nullptr, s);
      return;
    case LayerKind::kMaxPool2D:
      kc::max_pool2d_forward(pool_desc(l, b), in, out, s);
      return;
    case LayerKind::kFlatten:
      return;  // aliased
  }
  throw std::logic_error(std::string("no device layer for ") + l.name());
}

void DeviceModel::backward_layer(std::size_t i, int b, k::Stream s) const {
  const LayerSpec& l = spec_.layers()[i];
  const float* in = layer_input(i);
  float* dy = dact_[i];
  float* dx = i == 0 ? nullptr : dact_[i - 1];  // the first layer's input gradient: never needed
  const auto over = k::Accumulate::kOverwrite;
  switch (l.kind) {
    case LayerKind::kConv2D:
      if (!dx) {  // a first layer: the weights' and the bias's gradients only, fused when direct
        kc::conv2d_bias_act_backward_weights(conv_desc(l, b), l.activation, in, act_[i], dy,
                                             dweights(i), dbias(i), ws(), over, s);
        return;
      }
      kc::bias_act_backward(bias_desc(l, b), act_[i], dy, dbias(i), over, s);
      kc::conv2d_backward_weights(conv_desc(l, b), in, dy, dweights(i), ws(), over, s);
      if (dx) kc::conv2d_backward_data(conv_desc(l, b), weights(i), dy, dx, ws(), s);
      return;
    case LayerKind::kDense:
      kc::bias_act_backward(bias_desc(l, b), act_[i], dy, dbias(i), over, s);
      kc::dense_backward_weights(dense_desc(l, b), in, dy, dweights(i), over, s);
      if (dx) kc::dense_backward_data(dense_desc(l, b), weights(i), dy, dx, s);
      return;
    case LayerKind::kReLU:
      if (!dx) return;
      kc::bias_act_backward(relu_desc(l, b), act_[i], dy, nullptr, over, s);
      copy(dx, dy, std::size_t(b) * l.input.size(), s);
      return;
    case LayerKind::kMaxPool2D:
      if (dx) kc::max_pool2d_backward(pool_desc(l, b), in, dy, dx, s);
      return;
    case LayerKind::kFlatten:
      return;  // aliased
  }
  throw std::logic_error(std::string("no device layer for ") + l.name());
}

void DeviceModel::forward_loss(int b, float grad_scale, k::Stream s) const {
  for (std::size_t i = 0; i < spec_.layers().size(); ++i) forward_layer(i, b, s);
  const int classes = int(spec_.output().size());
  const float* logits = act_.back();
  kc::accuracy_count({b, classes}, logits, y_.get(), correct_.get(), s);
  // Evaluation (grad_scale 0) still forms a gradient; it goes to the scratch the step overwrites.
  kc::softmax_xent({b, classes, grad_scale > 0 ? grad_scale : 1.0f}, logits, y_.get(), dact_.back(),
                   loss_.get(), s);
}

void DeviceModel::backward(int b, k::Stream s, const GradReady& ready) const {
  for (std::size_t i = spec_.layers().size(); i-- > 0;) {
    backward_layer(i, b, s);
    if (ready && spec_.params_of(i).floats > 0) ready(spec_.params_of(i).offset);
  }
}

}  // namespace gpurun::runtime::cuda

// layers.cc: the CPU layers (Conv2D, Dense, ReLU, Flatten, MaxPool2D) over the kernels' cpu:: ops.
#include "cpu/layers.h"

#include <algorithm>

#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/dense.h"
#include "gpurun/kernels/pool2d.h"

namespace gpurun::runtime {
namespace {

namespace k = gpurun::kernels;

std::size_t aligned(std::size_t n) {
  return (n + kParamAlign - 1) / kParamAlign * kParamAlign;
}

// Conv2D (stride 1, no padding, like Keras's default "valid") + bias + activation.
class Conv2d final : public Layer {
 public:
  explicit Conv2d(const LayerSpec& s) : Layer(s) {
    d_.in_c = s.input.c;
    d_.in_h = s.input.h;
    d_.in_w = s.input.w;
    d_.out_c = s.units;
    d_.k_h = d_.k_w = s.kernel;
    d_.batch = 1;
    k::validate(d_);
  }
  void bind(float* p, float* g) override {
    w_ = p;
    b_ = p + aligned(d_.w_floats());
    dw_ = g;
    db_ = g + aligned(d_.w_floats());
  }
  std::size_t workspace_floats(int batch) const override {
    return k::cpu::conv2d_workspace_floats(desc(batch));
  }
  void forward(int batch, const float* x, float* y, k::Workspace ws) override {
    k::cpu::conv2d_bias_act_forward(desc(batch), spec().activation, x, w_, b_, y, ws);
  }
  void backward(int batch, const float* x, const float* y, float* dy, float* dx, InputGrad need,
                k::Accumulate acc, k::Workspace ws) override {
    const k::Conv2dDesc d = desc(batch);
    if (need == InputGrad::kSkip) {
      return k::cpu::conv2d_bias_act_backward_weights(d, spec().activation, x, y, dy, dw_, db_, ws,
                                                      acc);
    }
    k::cpu::bias_act_backward(bias_desc(batch), y, dy, db_, acc);
    k::cpu::conv2d_backward_weights(d, x, dy, dw_, ws, acc);
    k::cpu::conv2d_backward_data(d, w_, dy, dx, ws);
  }
  // Channels [lo, hi) / HW image by image: one image's channels are contiguous in NCHW.
  int output_unit() const override { return d_.out_h() * d_.out_w(); }
  void forward_cols(int batch, const float* x, int lo, int hi, float* y,
                    k::Workspace ws) const override {
    for_channel_groups(lo, hi, [&](const Channels& c, int at) {
      for (int n = 0; n < batch; ++n) {
        k::cpu::conv2d_bias_act_forward(c.desc, spec().activation, x + n * d_.x_floats(),
                                        w_ + c.first * c.w_floats, b_ + c.first,
                                        y + n * d_.y_floats() + std::size_t(at), ws);
      }
    });
  }
  void backward_params_cols(int batch, const float* x, const float* y, float* dy, int lo, int hi,
                            k::Workspace ws) override {
    std::fill(dw_, dw_ + d_.w_floats(), 0.0f);
    std::fill(db_, db_ + d_.out_c, 0.0f);
    for_channel_groups(lo, hi, [&](const Channels& c, int at) {
      for (int n = 0; n < batch; ++n) {
        const std::size_t i = n * d_.y_floats() + std::size_t(at);
        k::cpu::conv2d_bias_act_backward_weights(
            c.desc, spec().activation, x + n * d_.x_floats(), y + i, dy + i,
            dw_ + c.first * c.w_floats, db_ + c.first, ws,
            n == 0 ? k::Accumulate::kOverwrite : k::Accumulate::kAdd);
      }
    });
  }

 private:
  k::Conv2dDesc desc(int batch) const {
    k::Conv2dDesc d = d_;
    d.batch = batch;
    return d;
  }
  k::BiasActDesc bias_desc(int batch) const {
    return {batch, d_.out_c, d_.out_h() * d_.out_w(), spec().activation};
  }
  // Output columns [lo, hi) of one image as a convolution of its own: the channels from
  // `first`, with weights w_floats apart.
  struct Channels {
    k::Conv2dDesc desc;
    std::size_t first, w_floats;
  };
  Channels channels(int lo, int hi) const {
    const int unit = output_unit();
    if (lo < 0 || hi <= lo || hi > d_.out_c * unit || lo % unit != 0 || hi % unit != 0) {
      throw std::invalid_argument(name() + ": columns [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + ") are not whole output channels");
    }
    Channels c{d_, std::size_t(lo / unit), std::size_t(d_.in_c) * d_.k_h * d_.k_w};
    c.desc.out_c = (hi - lo) / unit;
    return c;
  }
  // Calls f(channels, first column) once for output columns [lo, hi) when the kernels give each
  // channel the same bits whatever other channels a call covers, else once per channel: either
  // way a channel's values do not depend on lo and hi (a split's bits on where it falls).
  template <class F>
  void for_channel_groups(int lo, int hi, F f) const {
    const Channels all = channels(lo, hi);
    const int step = k::cpu::conv2d_channels_independent(all.desc) ? hi - lo : output_unit();
    for (int at = lo; at < hi; at += step) f(channels(at, at + step), at);
  }
  k::Conv2dDesc d_;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

// Dense + bias + activation; flattens its input.
class Dense final : public Layer {
 public:
  explicit Dense(const LayerSpec& s) : Layer(s), in_(int(s.input.size())), out_(s.units) {
    k::validate(desc(1));
  }
  void bind(float* p, float* g) override {
    const std::size_t wn = aligned(std::size_t(out_) * in_);
    w_ = p;
    b_ = p + wn;
    dw_ = g;
    db_ = g + wn;
  }
  std::size_t workspace_floats(int) const override { return 0; }
  void forward(int batch, const float* x, float* y, k::Workspace) override {
    k::cpu::dense_forward(desc(batch), x, w_, y);
    finish_forward(batch, y);
  }
  // In pieces even with no one to tell: a block of dW's rows or of dX's columns keeps its
  // operands in cache (about 8% faster a step for mnist_cnn on one core than whole products).
  void backward(int batch, const float* x, const float* y, float* dy, float* dx, InputGrad need,
                k::Accumulate acc, k::Workspace ws) override {
    backward_in_pieces(batch, x, y, dy, dx, need, acc, ws, {[](std::size_t) {}, [] {}});
  }
  // dB, then dW a block of rows at a time from the last (the slice's end first), then dX a block
  // of columns at a time: each piece of dW goes out to be summed while the next is computed.
  void backward_in_pieces(int batch, const float* x, const float* y, float* dy, float* dx,
                          InputGrad need, k::Accumulate acc, k::Workspace,
                          const Pieces& pieces) override {
    constexpr int kPieces = 8;
    const k::DenseDesc d = desc(batch);
    k::cpu::bias_act_backward(bias_desc(batch), y, dy, db_, acc);
    pieces.ready(aligned(std::size_t(out_) * in_));
    const int rows = (out_ + kPieces - 1) / kPieces;
    for (int hi = out_; hi > 0; hi -= rows) {
      const int lo = std::max(0, hi - rows);
      k::cpu::dense_backward_weights_rows(d, x, dy, lo, hi, dw_, acc);
      pieces.ready(std::size_t(lo) * in_);
    }
    if (need == InputGrad::kSkip) return;
    const int cols = (in_ + kPieces - 1) / kPieces;
    for (int lo = 0; lo < in_; lo += cols) {
      k::cpu::dense_backward_data_cols(d, w_, dy, lo, std::min(in_, lo + cols), dx);
      pieces.progress();
    }
  }
  Range deferred_weights() const override { return {0, std::size_t(out_) * in_}; }
  int deferred_rows() const override { return out_; }
  void backward_deferred(int batch, const float* x, const float* y, float* dy, float* dx,
                         InputGrad need, k::Workspace) override {
    (void)x;
    k::cpu::bias_act_backward(bias_desc(batch), y, dy, db_);
    // dx needs the weights before anyone updates them: the trainer updates after a barrier.
    if (need == InputGrad::kCompute) k::cpu::dense_backward_data(desc(batch), w_, dy, dx);
  }
  void weight_cols(int batch, const float* x, const float* dz, int lo, int hi, float alpha,
                   float beta, float* c) const override {
    k::cpu::dense_weight_cols(desc(batch), x, dz, lo, hi, alpha, beta, c);
  }
  void product_cols(int batch, const float* x, int lo, int hi, float* y) const override {
    k::cpu::dense_forward_cols(desc(batch), x, w_, lo, hi, y);
  }
  void finish_forward(int batch, float* y) const override {
    k::cpu::bias_act_forward(bias_desc(batch), y, b_);
  }
  void input_grad_cols(int batch, const float* dz, int lo, int hi, float* dx) const override {
    k::cpu::dense_backward_data_cols(desc(batch), w_, dz, lo, hi, dx);
  }

 private:
  k::DenseDesc desc(int batch) const { return {batch, in_, out_}; }
  k::BiasActDesc bias_desc(int batch) const { return {batch, out_, 1, spec().activation}; }
  int in_, out_;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

// ReLU: bias_act without a bias. Backward masks dy by the output (y > 0) into dx.
class Relu final : public Layer {
 public:
  explicit Relu(const LayerSpec& s) : Layer(s) {}
  std::size_t workspace_floats(int) const override { return 0; }
  void forward(int batch, const float* x, float* y, k::Workspace) override {
    std::copy(x, x + floats(batch), y);
    k::cpu::bias_act_forward(desc(batch), y, nullptr);
  }
  void backward(int batch, const float*, const float* y, float* dy, float* dx, InputGrad need,
                k::Accumulate, k::Workspace) override {
    if (need == InputGrad::kSkip) return;
    k::cpu::bias_act_backward(desc(batch), y, dy, nullptr);
    std::copy(dy, dy + floats(batch), dx);
  }

 private:
  std::size_t floats(int batch) const { return std::size_t(batch) * input_shape().size(); }
  k::BiasActDesc desc(int batch) const {
    return {batch, 1, int(input_shape().size()), k::Activation::kRelu};
  }
};

// Flatten: the same floats under a flat shape (NCHW is already row-major per example).
class Flatten final : public Layer {
 public:
  explicit Flatten(const LayerSpec& s) : Layer(s) {}
  std::size_t workspace_floats(int) const override { return 0; }
  void forward(int batch, const float* x, float* y, k::Workspace) override {
    std::copy(x, x + std::size_t(batch) * input_shape().size(), y);
  }
  void backward(int batch, const float*, const float*, float* dy, float* dx, InputGrad need,
                k::Accumulate, k::Workspace) override {
    if (need == InputGrad::kCompute)
      std::copy(dy, dy + std::size_t(batch) * input_shape().size(), dx);
  }
};

class MaxPool2d final : public Layer {
 public:
  explicit MaxPool2d(const LayerSpec& s) : Layer(s) { k::validate(desc(1)); }
  std::size_t workspace_floats(int) const override { return 0; }
  void forward(int batch, const float* x, float* y, k::Workspace) override {
    k::cpu::max_pool2d_forward(desc(batch), x, y);
  }
  void backward(int batch, const float* x, const float*, float* dy, float* dx, InputGrad need,
                k::Accumulate, k::Workspace) override {
    if (need == InputGrad::kCompute) k::cpu::max_pool2d_backward(desc(batch), x, dy, dx);
  }

 private:
  k::Pool2dDesc desc(int batch) const {
    const Shape in = input_shape();
    return {batch, in.c, in.h, in.w, spec().kernel, spec().stride};
  }
};

}  // namespace

std::unique_ptr<Layer> make_layer(const LayerSpec& spec) {
  switch (spec.kind) {
    case LayerKind::kConv2D:
      return std::make_unique<Conv2d>(spec);
    case LayerKind::kDense:
      return std::make_unique<Dense>(spec);
    case LayerKind::kReLU:
      return std::make_unique<Relu>(spec);
    case LayerKind::kFlatten:
      return std::make_unique<Flatten>(spec);
    case LayerKind::kMaxPool2D:
      return std::make_unique<MaxPool2d>(spec);
  }
  throw std::invalid_argument(std::string("no CPU layer for ") + spec.name());
}

}  // namespace gpurun::runtime

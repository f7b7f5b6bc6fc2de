// layers.cc: Conv2D and Dense layers over the kernels' cpu:: ops.
#include "gpurun/runtime/layers.h"

#include <cmath>

#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/dense.h"

namespace gpurun::runtime {
namespace {

namespace k = gpurun::kernels;

std::size_t aligned(std::size_t n) {
  return (n + kParamAlign - 1) / kParamAlign * kParamAlign;
}

void glorot(Rng& rng, float* w, std::size_t n, double fan_in, double fan_out) {
  const float limit = float(std::sqrt(6.0 / (fan_in + fan_out)));
  for (std::size_t i = 0; i < n; ++i) w[i] = rng.uniform(-limit, limit);
}

class Conv2d final : public Layer {
 public:
  Conv2d(Shape in, int out_c, int kernel, k::Activation act) : in_(in), act_(act) {
    d_.in_c = in.c;
    d_.in_h = in.h;
    d_.in_w = in.w;
    d_.out_c = out_c;
    d_.k_h = d_.k_w = kernel;
    d_.batch = 1;
    k::validate(d_);
  }
  std::string name() const override { return "conv2d"; }
  Shape input_shape() const override { return in_; }
  Shape output_shape() const override { return {d_.out_c, d_.out_h(), d_.out_w()}; }
  std::size_t param_floats() const override {
    return aligned(d_.w_floats()) + aligned(std::size_t(d_.out_c));
  }
  void bind(float* p, float* g) override {
    w_ = p;
    b_ = p + aligned(d_.w_floats());
    dw_ = g;
    db_ = g + aligned(d_.w_floats());
  }
  void init(Rng& rng) override {
    const double rf = double(d_.k_h) * d_.k_w;
    glorot(rng, w_, d_.w_floats(), rf * d_.in_c, rf * d_.out_c);
    for (int c = 0; c < d_.out_c; ++c) b_[c] = 0.0f;
  }
  std::size_t workspace_floats(int batch) const override {
    return k::cpu::conv2d_workspace_floats(desc(batch));
  }
  void forward(int batch, const float* x, float* y, k::Workspace ws) override {
    const k::Conv2dDesc d = desc(batch);
    k::cpu::conv2d_forward(d, x, w_, y, ws);
    k::cpu::bias_act_forward(bias_desc(batch), y, b_);
  }
  void backward(int batch, const float* x, const float* y, float* dy, float* dx, InputGrad need,
                k::Accumulate acc, k::Workspace ws) override {
    const k::Conv2dDesc d = desc(batch);
    k::cpu::bias_act_backward(bias_desc(batch), y, dy, db_, acc);
    k::cpu::conv2d_backward_weights(d, x, dy, dw_, ws, acc);
    if (need == InputGrad::kCompute) k::cpu::conv2d_backward_data(d, w_, dy, dx, ws);
  }

 private:
  k::Conv2dDesc desc(int batch) const {
    k::Conv2dDesc d = d_;
    d.batch = batch;
    return d;
  }
  k::BiasActDesc bias_desc(int batch) const {
    return {batch, d_.out_c, d_.out_h() * d_.out_w(), act_};
  }
  Shape in_;
  k::Conv2dDesc d_;
  k::Activation act_;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

class Dense final : public Layer {
 public:
  Dense(Shape in, int out, k::Activation act) : in_(in), out_(out), act_(act) {
    k::validate(desc(1));
  }
  std::string name() const override { return "dense"; }
  Shape input_shape() const override { return in_; }
  Shape output_shape() const override { return {out_, 1, 1}; }
  std::size_t param_floats() const override {
    return aligned(std::size_t(out_) * in_.size()) + aligned(std::size_t(out_));
  }
  void bind(float* p, float* g) override {
    const std::size_t wn = aligned(std::size_t(out_) * in_.size());
    w_ = p;
    b_ = p + wn;
    dw_ = g;
    db_ = g + wn;
  }
  void init(Rng& rng) override {
    glorot(rng, w_, std::size_t(out_) * in_.size(), double(in_.size()), double(out_));
    for (int c = 0; c < out_; ++c) b_[c] = 0.0f;
  }
  std::size_t workspace_floats(int) const override { return 0; }
  void forward(int batch, const float* x, float* y, k::Workspace) override {
    k::cpu::dense_forward(desc(batch), x, w_, y);
    k::cpu::bias_act_forward({batch, out_, 1, act_}, y, b_);
  }
  void backward(int batch, const float* x, const float* y, float* dy, float* dx, InputGrad need,
                k::Accumulate acc, k::Workspace) override {
    const k::DenseDesc d = desc(batch);
    k::cpu::bias_act_backward({batch, out_, 1, act_}, y, dy, db_, acc);
    k::cpu::dense_backward_weights(d, x, dy, dw_, acc);
    if (need == InputGrad::kCompute) k::cpu::dense_backward_data(d, w_, dy, dx);
  }
  Range deferred_weights() const override { return {0, std::size_t(out_) * in_.size()}; }
  int deferred_rows() const override { return out_; }
  void backward_deferred(int batch, const float* x, const float* y, float* dy, float* dx,
                         InputGrad need, k::Workspace) override {
    (void)x;
    k::cpu::bias_act_backward({batch, out_, 1, act_}, y, dy, db_);
    // dx needs the weights before anyone updates them: the trainer updates after a barrier.
    if (need == InputGrad::kCompute) k::cpu::dense_backward_data(desc(batch), w_, dy, dx);
  }
  void weight_rows(int batch, const float* x, const float* dz, int lo, int hi, float alpha,
                   float beta, float* c) const override {
    k::cpu::dense_weight_rows(desc(batch), x, dz, lo, hi, alpha, beta, c);
  }

 private:
  k::DenseDesc desc(int batch) const { return {batch, int(in_.size()), out_}; }
  Shape in_;
  int out_;
  k::Activation act_;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(Shape in, int out_channels, int kernel,
                                   kernels::Activation act) {
  return std::make_unique<Conv2d>(in, out_channels, kernel, act);
}

std::unique_ptr<Layer> make_dense(Shape in, int out, kernels::Activation act) {
  return std::make_unique<Dense>(in, out, act);
}

}  // namespace gpurun::runtime

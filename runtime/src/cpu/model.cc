// model.cc: the sequential model: binding layers to the flat buffers, forward, loss, backward.
#include "cpu/model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gpurun/kernels/accuracy.h"
#include "gpurun/kernels/softmax_xent.h"

namespace gpurun::runtime {

namespace k = gpurun::kernels;

Model::Model(const ModelSpec& spec, int max_batch)
    : spec_(spec), classes_(int(spec.output().size())), max_batch_(max_batch) {
  if (spec.layers().empty()) throw std::invalid_argument("model: no layers");
  if (max_batch < 1) throw std::invalid_argument("model: max_batch must be >= 1");
  n_params_ = spec.param_floats();
  params_ = FloatBuffer(n_params_);
  grads_ = FloatBuffer(n_params_ + kStatSlots);
  std::size_t ws = 0;
  for (std::size_t i = 0; i < spec.layers().size(); ++i) {
    layers_.push_back(make_layer(spec.layers()[i]));
    const Layer& l = *layers_.back();
    const Layer::Range dr = l.deferred_weights();
    if (dr.end > dr.begin) {
      deferred_.push_back(
          {i, spec.params_of(i).offset + dr.begin, l.deferred_rows(), int(l.input_shape().size())});
    }
    const std::size_t a = std::size_t(max_batch) * l.output_shape().size();
    acts_.emplace_back(a);
    dacts_.emplace_back(a);
    ws = std::max(ws, l.workspace_floats(max_batch));
  }
  bound_act_.assign(layers_.size(), nullptr);
  bound_dact_.assign(layers_.size(), nullptr);
  bind_layers(params_.data());
  workspace_ = FloatBuffer(std::max<std::size_t>(ws, 1));
  dlogits_ = FloatBuffer(std::size_t(max_batch) * classes_);
}

void Model::bind_layers(float* params) {
  param_base_ = params;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::size_t off = spec_.params_of(i).offset;
    layers_[i]->bind(params + off, grads_.data() + off);
  }
}

void Model::share_params(Model& owner) {
  if (owner.n_params_ != n_params_ || owner.layers_.size() != layers_.size()) {
    throw std::invalid_argument("model: cannot share parameters between different networks");
  }
  use_param_storage(owner.params());
}

void Model::use_param_storage(float* params) {
  bind_layers(params);
  params_ = FloatBuffer();  // unused from now on
}

void Model::write_stats(const StepResult& r) {
  float* s = stats();
  s[kLossSum] = float(r.loss_sum);
  s[kCorrect] = float(r.correct);
  s[kStopFlag] = 0.0f;
  s[3] = 0.0f;
}

void Model::init(std::uint64_t seed) {
  spec_.init_params(seed, param_base_);
}

std::optional<std::size_t> Model::deferred_index(std::size_t i) const {
  for (std::size_t k = 0; k < deferred_.size(); ++k) {
    if (deferred_[k].layer == i) return k;
  }
  return std::nullopt;
}

std::optional<std::size_t> Model::split_index(std::size_t i, const DeferredPeers* peers) const {
  const std::optional<std::size_t> k = deferred_index(i);
  return peers && k && peers->split(*k) ? k : std::nullopt;
}

std::optional<std::size_t> Model::stepped_index(std::size_t i, const DeferredPeers* peers) const {
  const std::optional<std::size_t> k = deferred_index(i);
  return peers && k && peers->updates_in_backward(*k) ? k : std::nullopt;
}

void Model::run_forward(int batch, const float* x, bool bound, DeferredPeers* peers) {
  if (batch < 1 || batch > max_batch_) {
    throw std::invalid_argument("model: batch " + std::to_string(batch) + " outside [1, " +
                                std::to_string(max_batch_) + "]");
  }
  const k::Workspace ws{workspace_.data(), workspace_.size()};
  const float* in = x;
  if (bound && bound_input_) {
    std::copy(x, x + std::size_t(batch) * input_shape().size(), bound_input_);
    in = bound_input_;
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    float* out = act(i, bound);
    if (i == 0 && peers && peers->split_first()) {
      peers->forward_first();
    } else if (const std::optional<std::size_t> k = split_index(i, peers)) {
      peers->forward(*k, out);
      layers_[i]->finish_forward(batch, out);
    } else {
      layers_[i]->forward(batch, in, out, ws);
    }
    in = out;
  }
}

StepResult Model::forward_backward(int batch, const float* x, const std::int32_t* labels,
                                   int micro_batch, const GradReady* ready) {
  const int micro = micro_batch > 0 ? micro_batch : batch;
  if (batch % micro != 0) {
    throw std::invalid_argument("model: micro-batch " + std::to_string(micro) +
                                " does not divide the batch " + std::to_string(batch));
  }
  StepResult r;
  const k::Workspace ws{workspace_.data(), workspace_.size()};
  const std::size_t img = input_shape().size();
  for (int first = 0; first < batch; first += micro) {
    const float* xb = x + std::size_t(first) * img;
    const std::int32_t* yb = labels + first;
    run_forward(micro, xb, false);
    const float* logits = acts_.back().data();
    std::int64_t correct = 0;
    k::cpu::accuracy_count({micro, classes_}, logits, yb, &correct);
    float loss = 0;
    // 1/batch (not 1/micro): the accumulated sum is the gradient of the whole batch's mean loss.
    k::cpu::softmax_xent({micro, classes_, 1.0f / float(batch)}, logits, yb, dacts_.back().data(),
                         &loss);
    const k::Accumulate acc = first == 0 ? k::Accumulate::kOverwrite : k::Accumulate::kAdd;
    for (std::size_t i = layers_.size(); i-- > 0;) {
      const float* in = i == 0 ? xb : acts_[i - 1].data();
      float* din = i == 0 ? nullptr : dacts_[i - 1].data();
      const InputGrad need = i == 0 ? InputGrad::kSkip : InputGrad::kCompute;
      if (ready && first + micro == batch)
        backward_in_pieces(i, micro, in, din, need, acc, ws, *ready);
      else
        layers_[i]->backward(micro, in, acts_[i].data(), dacts_[i].data(), din, need, acc, ws);
    }
    r.loss_sum += loss;
    r.correct += correct;
  }
  write_stats(r);
  return r;
}

void Model::backward_in_pieces(std::size_t i, int batch, const float* x, float* dx,
                               InputGrad need, k::Accumulate acc, k::Workspace ws,
                               const GradReady& ready) {
  const std::size_t base = spec_.params_of(i).offset;
  Layer::Pieces pieces{[&](std::size_t from) { ready.ready(base + from); }, ready.progress};
  if (spec_.params_of(i).floats == 0) pieces.ready = [&](std::size_t) { ready.progress(); };
  layers_[i]->backward_in_pieces(batch, x, acts_[i].data(), dacts_[i].data(), dx, need, acc, ws,
                                 pieces);
}

StepResult Model::forward_backward_deferred(int batch, const float* x, const std::int32_t* labels,
                                            DeferredPeers* peers) {
  for (std::size_t k = 0; k < deferred_.size(); ++k) {
    const std::size_t l = deferred_[k].layer;
    if (peers && peers->split(k) && (!splittable(k) || !bound_act_[l - 1] || !bound_dact_[l - 1])) {
      throw std::logic_error("model: a split layer needs its X and dX bound (bind_deferred)");
    }
  }
  if (peers && peers->split_first() && !bound_input_) {
    throw std::logic_error("model: a split first layer needs its input bound (bind_input)");
  }
  run_forward(batch, x, true, peers);
  const std::size_t last = layers_.size() - 1;
  const float* logits = act(last, true);
  StepResult r;
  k::cpu::accuracy_count({batch, classes_}, logits, labels, &r.correct);
  float loss = 0;
  k::cpu::softmax_xent({batch, classes_, 1.0f / float(batch)}, logits, labels, dact(last, true),
                       &loss);
  r.loss_sum = loss;
  const k::Workspace ws{workspace_.data(), workspace_.size()};
  const float* input = bound_input_ ? bound_input_ : x;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const float* in = i == 0 ? input : act(i - 1, true);
    float* din = i == 0 ? nullptr : dact(i - 1, true);
    const InputGrad need = i == 0 ? InputGrad::kSkip : InputGrad::kCompute;
    if (layers_[i]->deferred_weights().end > 0) {
      const std::optional<std::size_t> k = split_index(i, peers);
      const std::optional<std::size_t> stepped = stepped_index(i, peers);
      layers_[i]->backward_deferred(batch, in, act(i, true), dact(i, true), din,
                                    k || stepped ? InputGrad::kSkip : need, ws);
      if (k) peers->backward_data(*k);
      if (stepped) peers->backward_and_update(*stepped, din);
      if (peers && i == deferred_.front().layer) peers->released();
    } else if (i == 0 && peers && peers->split_first()) {
      peers->backward_first();
    } else {
      layers_[i]->backward(batch, in, act(i, true), dact(i, true), din, need,
                           k::Accumulate::kOverwrite, ws);
    }
  }
  if (peers && deferred_.empty()) peers->released();
  write_stats(r);
  return r;
}

void Model::bind_deferred(std::size_t k, float* x, float* dz, float* dx) {
  if (dx && !splittable(k)) {
    throw std::invalid_argument("model: deferred layer " + std::to_string(k) +
                                " cannot be split, so it has no dX to bind");
  }
  const std::size_t l = deferred_.at(k).layer;
  if (l == 0) {
    bound_input_ = x;
  } else {
    bound_act_[l - 1] = x;
    if (dx) bound_dact_[l - 1] = dx;
  }
  bound_dact_[l] = dz;
}

bool Model::splittable(std::size_t k) const {
  const std::size_t l = deferred_.at(k).layer;
  return l > 0 && (k == 0 || deferred_[k - 1].layer != l - 1);
}

void Model::deferred_weight_cols(std::size_t k, int batch, const float* x, const float* dz, int lo,
                                 int hi, float alpha, float beta, float* buffer) const {
  const Deferred& d = deferred_.at(k);
  layers_[d.layer]->weight_cols(batch, x, dz, lo, hi, alpha, beta, buffer + d.offset);
}

void Model::first_forward_cols(int batch, const float* x, int lo, int hi, float* y) {
  layers_.front()->forward_cols(batch, x, lo, hi, y, {workspace_.data(), workspace_.size()});
}

void Model::first_backward_cols(int batch, const float* x, const float* y, float* dy, int lo,
                                int hi) {
  layers_.front()->backward_params_cols(batch, x, y, dy, lo, hi,
                                        {workspace_.data(), workspace_.size()});
}

void Model::deferred_product_cols(std::size_t k, int batch, const float* x, int lo, int hi,
                                  float* y) const {
  layers_[deferred_.at(k).layer]->product_cols(batch, x, lo, hi, y);
}

void Model::deferred_input_grad_cols(std::size_t k, int batch, const float* dz, int lo, int hi,
                                     float* dx) const {
  layers_[deferred_.at(k).layer]->input_grad_cols(batch, dz, lo, hi, dx);
}

std::vector<Layer::Range> Model::undeferred_ranges() const {
  std::vector<Layer::Range> out;
  std::size_t at = 0;
  for (const Deferred& d : deferred_) {
    if (d.offset > at) out.push_back({at, d.offset});
    at = d.offset + std::size_t(d.rows) * std::size_t(d.in);
  }
  if (at < n_params_) out.push_back({at, n_params_});
  return out;
}

StepResult Model::evaluate(int batch, const float* x, const std::int32_t* labels) {
  run_forward(batch, x, false);
  const float* logits = acts_.back().data();
  StepResult r;
  k::cpu::accuracy_count({batch, classes_}, logits, labels, &r.correct);
  float loss = 0;
  k::cpu::softmax_xent({batch, classes_, 1.0f}, logits, labels, dlogits_.data(), &loss);
  r.loss_sum = loss;
  return r;
}

}  // namespace gpurun::runtime

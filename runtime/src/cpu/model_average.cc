// model_average.cc: local SGD's averages (model_average.h).
#include "cpu/model_average.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "group/bf16.h"

namespace gpurun::runtime::cpu {

ModelAverage::ModelAverage(ProcessGroup& pg, int every, std::size_t floats, bool bf16, bool overlap)
    : pg_(pg), every_(every), n_(floats), bf16_(bf16), overlap_(overlap) {
  if (bf16_ || overlap_) last_.resize(n_);
  if (bf16_) delta_.resize(n_);
  if (overlap_ && bf16_) own16_.resize(n_), sum16_.resize(n_);
  if (overlap_ && !bf16_) own_.resize(n_), sum_.resize(n_);
}

void ModelAverage::reset(const float* params) {
  if (params_sum_) throw std::logic_error("local SGD: reset with an average in flight");
  if (!last_.empty()) std::copy(params, params + n_, last_.begin());
}

void ModelAverage::average(float* params, Progress& p, SyncAt at) {
  if (pg_.size() == 1) return;
  const auto t = std::chrono::steady_clock::now();
  if (!overlap_) {
    average_now(params, p);
  } else {
    Progress earlier = finish(params);
    if (at != SyncAt::kSettle && !earlier.stop) {
      start(params, p);
      p = std::move(earlier);
    } else {
      average_now(params, p);
      p.steps += earlier.steps;
      p.loss_sum += earlier.loss_sum;
      p.correct += earlier.correct;
      p.stop = p.stop || earlier.stop;
      p.rank_losses.insert(p.rank_losses.begin(), earlier.rank_losses.begin(),
                           earlier.rank_losses.end());
    }
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

Progress ModelAverage::land(float* params) {
  if (!params_sum_) throw std::logic_error("local SGD: land with no average in flight");
  const auto t = std::chrono::steady_clock::now();
  Progress p = finish(params);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  return p;
}

void ModelAverage::swap_with_average(float* params) {
  if (!overlap_ || params_sum_) throw std::logic_error("local SGD: no landed average to swap in");
  std::swap_ranges(params, params + n_, last_.begin());
}

void ModelAverage::average_now(float* params, Progress& p) {
  double sums[3] = {p.loss_sum, p.correct, p.stop ? 1.0 : 0.0};
  pg_.allreduce_sum(sums, 3);
  p.loss_sum = sums[0];
  p.correct = sums[1];
  p.stop = sums[2] > 0;
  if (bf16_) {
    average_bf16(params);
  } else {
    pg_.allreduce_sum(params, n_);
    const float mean = 1.0f / float(pg_.size());
    for (std::size_t i = 0; i < n_; ++i) params[i] *= mean;
    if (overlap_) std::copy(params, params + n_, last_.begin());
  }
}

// The last average plus the mean of the ranks' changes since, each change rounded to bfloat16.
void ModelAverage::average_bf16(float* params) {
  for (std::size_t i = 0; i < n_; ++i) delta_[i] = to_bf16(params[i] - last_[i]);
  pg_.allreduce_sum_bf16(delta_.data(), n_);
  const float mean = 1.0f / float(pg_.size());
  for (std::size_t i = 0; i < n_; ++i) params[i] = last_[i] += from_bf16(delta_[i]) * mean;
}

// Overlap: this rank's change since the last average, and p's statistics, set travelling.
void ModelAverage::start(const float* params, const Progress& p) {
  if (bf16_) {
    for (std::size_t i = 0; i < n_; ++i) own16_[i] = sum16_[i] = to_bf16(params[i] - last_[i]);
    params_sum_ = pg_.start_allreduce_sum_bf16(sum16_.data(), n_);
  } else {
    for (std::size_t i = 0; i < n_; ++i) own_[i] = sum_[i] = params[i] - last_[i];
    params_sum_ = pg_.start_allreduce_sum(sum_.data(), n_);
  }
  stats_[0] = p.loss_sum;
  stats_[1] = p.correct;
  stats_[2] = p.stop ? 1.0 : 0.0;
  stats_sum_ = pg_.start_allreduce_sum(stats_, 3);
  sent_ = p;
}

void ModelAverage::progress() {
  if (params_sum_) params_sum_->test();
  if (stats_sum_) stats_sum_->test();
}

// Overlap: the average in flight, waited for and applied (the last average moves by the mean
// change; this rank's parameters by the mean change less its own), and its progress summed; an
// empty progress when none is in flight.
Progress ModelAverage::finish(float* params) {
  if (!params_sum_) return {};
  params_sum_->wait();
  stats_sum_->wait();
  params_sum_.reset();
  stats_sum_.reset();
  const float mean = 1.0f / float(pg_.size());
  if (bf16_) {
    for (std::size_t i = 0; i < n_; ++i) {
      const float d = from_bf16(sum16_[i]) * mean;
      last_[i] += d;
      params[i] += d - from_bf16(own16_[i]);
    }
  } else {
    for (std::size_t i = 0; i < n_; ++i) {
      const float d = sum_[i] * mean;
      last_[i] += d;
      params[i] += d - own_[i];
    }
  }
  Progress p = std::exchange(sent_, Progress{});
  p.loss_sum = stats_[0];
  p.correct = stats_[1];
  p.stop = stats_[2] > 0;
  return p;
}

void ModelAverage::describe(BackendInfo& info) const {
  info.exchange = "local-sgd";
  info.summary = "local SGD: each rank steps alone (" + info.summary +
                 "), the ranks' parameters averaged every " + std::to_string(every_) +
                 (bf16_ ? " steps, their changes sent as bfloat16" : " steps") +
                 (overlap_ ? ", each average overlapping the steps after it" : "");
  info.wire_bytes_per_step = bytes() / std::size_t(every_);
  info.exchange_bytes_per_step = pg_.size() > 1 ? info.wire_bytes_per_step : 0;
  info.compression = bf16_ ? "bf16" : "none";
  info.local_sgd = every_;
  info.local_sgd_overlap = overlap_;
}

std::size_t ModelAverage::bytes() const {
  return n_ * (bf16_ ? sizeof(std::uint16_t) : sizeof(float)) + 3 * sizeof(double);
}

}  // namespace gpurun::runtime::cpu

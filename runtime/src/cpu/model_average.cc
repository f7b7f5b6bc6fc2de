// model_average.cc: local SGD's averages (model_average.h).
#include "cpu/model_average.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "group/bf16.h"

namespace gpurun::runtime::cpu {

ModelAverage::ModelAverage(ProcessGroup& pg, int every, std::size_t floats, bool bf16)
    : pg_(pg), every_(every), n_(floats), bf16_(bf16) {
  if (bf16_) {
    last_.resize(n_);
    delta_.resize(n_);
  }
}

void ModelAverage::reset(const float* params) {
  if (bf16_) std::copy(params, params + n_, last_.begin());
}

void ModelAverage::average(float* params, Progress& p) {
  if (pg_.size() == 1) return;
  const auto t = std::chrono::steady_clock::now();
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
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The last average plus the mean of the ranks' changes since, each change rounded to bfloat16.
void ModelAverage::average_bf16(float* params) {
  for (std::size_t i = 0; i < n_; ++i) delta_[i] = to_bf16(params[i] - last_[i]);
  pg_.allreduce_sum_bf16(delta_.data(), n_);
  const float mean = 1.0f / float(pg_.size());
  for (std::size_t i = 0; i < n_; ++i) params[i] = last_[i] += from_bf16(delta_[i]) * mean;
}

void ModelAverage::describe(BackendInfo& info) const {
  info.exchange = "local-sgd";
  info.summary = "local SGD: each rank steps alone (" + info.summary +
                 "), the ranks' parameters averaged every " + std::to_string(every_) +
                 (bf16_ ? " steps, their changes sent as bfloat16" : " steps");
  info.wire_bytes_per_step = bytes() / std::size_t(every_);
  info.exchange_bytes_per_step = pg_.size() > 1 ? info.wire_bytes_per_step : 0;
  info.compression = bf16_ ? "bf16" : "none";
  info.local_sgd = every_;
}

std::size_t ModelAverage::bytes() const {
  return n_ * (bf16_ ? sizeof(std::uint16_t) : sizeof(float)) + 3 * sizeof(double);
}

}  // namespace gpurun::runtime::cpu

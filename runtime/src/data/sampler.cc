// sampler.cc: seeded Fisher-Yates shuffle and the rank's strided shard.
#include "data/sampler.h"

#include <stdexcept>
#include <string>

#include "model/rng.h"

namespace gpurun::runtime {

std::size_t steps_per_epoch(std::size_t n, int world, int batch) {
  if (world < 1 || batch < 1) {
    throw std::invalid_argument("sampler: bad world size " + std::to_string(world) +
                                " or batch size " + std::to_string(batch));
  }
  const std::size_t steps = n / (std::size_t(world) * std::size_t(batch));
  if (steps == 0) {
    throw std::invalid_argument("sampler: " + std::to_string(n) +
                                " examples cannot fill one global batch of " +
                                std::to_string(world) + " x " + std::to_string(batch));
  }
  return steps;
}

DistributedSampler::DistributedSampler(std::size_t n, int world, int rank, int batch,
                                       std::uint64_t seed)
    : n_(n), world_(world), rank_(rank), batch_(batch), seed_(seed) {
  if (rank < 0 || rank >= world) {
    throw std::invalid_argument("sampler: rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(world) + ")");
  }
  steps_ = runtime::steps_per_epoch(n, world, batch);
  perm_.resize(n);
  set_epoch(0);
}

void DistributedSampler::set_epoch(std::int64_t epoch) {
  for (std::size_t i = 0; i < n_; ++i) perm_[i] = std::int32_t(i);
  Rng rng = Rng::derive(seed_, std::uint64_t(epoch), 0x5A3D1E5);
  for (std::size_t i = n_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.below(i + 1)]);
}

void DistributedSampler::step_indices(std::size_t step, std::int32_t* out) const {
  if (step >= steps_) {
    throw std::out_of_range("sampler: step " + std::to_string(step) + " >= steps per epoch " +
                            std::to_string(steps_));
  }
  for (int k = 0; k < batch_; ++k) {
    out[k] = perm_[(step * world_ + rank_) * batch_ + k];
  }
}

std::vector<std::int32_t> eval_shard(std::size_t n, int world, int rank) {
  std::vector<std::int32_t> out;
  for (std::size_t i = rank; i < n; i += world) out.push_back(std::int32_t(i));
  return out;
}

}  // namespace gpurun::runtime

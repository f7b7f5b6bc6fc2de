// sampler.h: DistributedSampler semantics. Each epoch the dataset is permuted by a shuffle seeded
// by (seed, epoch), the same on every rank; rank r takes perm[r], perm[r + W], ... so shards are
// disjoint. Step s of rank r uses positions (s*B + k)*W + r, k < B: the global batch of step s is
// exactly perm[s*B*W, (s+1)*B*W), which is why 2 ranks x 32 see the images of 1 rank x 64.
// The last partial global batch is dropped so every rank does the same number of steps.
#pragma once

#include <cstdint>
#include <vector>

namespace gpurun::runtime {

class DistributedSampler {
 public:
  // Throws std::invalid_argument when the dataset cannot fill one global batch.
  DistributedSampler(std::size_t dataset_size, int world_size, int rank, int batch,
                     std::uint64_t seed);

  void set_epoch(std::int64_t epoch);  // recomputes the permutation
  std::size_t steps_per_epoch() const { return steps_; }
  // This rank's `batch` indices for step `step` of the current epoch, written to out.
  void step_indices(std::size_t step, std::int32_t* out) const;
  const std::vector<std::int32_t>& permutation() const { return perm_; }

 private:
  std::size_t n_;
  int world_, rank_, batch_;
  std::uint64_t seed_;
  std::size_t steps_;
  std::vector<std::int32_t> perm_;
};

// Evaluation shard: rank r takes r, r + W, ... of [0, n) in order; together they cover it once.
std::vector<std::int32_t> eval_shard(std::size_t n, int world_size, int rank);

}  // namespace gpurun::runtime

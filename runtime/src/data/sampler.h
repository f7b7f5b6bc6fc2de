// sampler.h: distributed sampling. Each epoch the dataset is permuted by a shuffle seeded by
// (seed, epoch), the same on every rank. The global batch of step s is perm[s*B*W, (s+1)*B*W) and
// rank r takes the r-th block of B in it, so ranks' shards are disjoint and together complete.
// Blocks (rather than DistributedSampler's stride) make rank r's images at step s exactly the r-th
// micro-batch of one rank doing B*W images: 2 ranks x 32 and 1 rank x 64 (2 micro-batches of 32)
// sum the same partial gradients. The last partial global batch is dropped so every rank does the
// same number of steps.
// (Private to the runtime: the trainer deals the indices, and a backend gets them in EpochPlan.)
#pragma once

#include <cstdint>
#include <vector>

namespace gpurun::runtime {

// Steps in an epoch of n examples at world_size x batch per step: the last partial global batch
// is dropped. Throws std::invalid_argument when n cannot fill one global batch.
std::size_t steps_per_epoch(std::size_t n, int world_size, int batch);

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

// sampler_test.cc: shards are disjoint and complete, the shuffle is a function of (seed, epoch)
// only, and the global batch of a step does not depend on how it is split across ranks.
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace gpurun::runtime {
namespace {

std::vector<std::int32_t> epoch_indices(std::size_t n, int world, int rank, int batch,
                                        std::uint64_t seed, int epoch) {
  DistributedSampler s(n, world, rank, batch, seed);
  s.set_epoch(epoch);
  std::vector<std::int32_t> all, step(batch);
  for (std::size_t k = 0; k < s.steps_per_epoch(); ++k) {
    s.step_indices(k, step.data());
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

TEST(Sampler, ShardsAreDisjointAndCoverAllButTheDroppedTail) {
  const std::size_t n = 1000;
  for (int world : {1, 2, 3, 8}) {
    std::set<std::int32_t> seen;
    std::size_t total = 0;
    for (int r = 0; r < world; ++r) {
      for (std::int32_t i : epoch_indices(n, world, r, 16, 7, 3)) {
        EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice, world " << world;
        EXPECT_GE(i, 0);
        EXPECT_LT(i, std::int32_t(n));
        ++total;
      }
    }
    EXPECT_EQ(total, n / (16 * world) * 16 * world) << "world " << world;
  }
}

TEST(Sampler, CompleteWhenDivisible) {
  std::set<std::int32_t> seen;
  for (int r = 0; r < 4; ++r)
    for (std::int32_t i : epoch_indices(256, 4, r, 8, 1, 0)) seen.insert(i);
  EXPECT_EQ(seen.size(), 256u);
}

TEST(Sampler, DeterministicPerSeedAndEpochAndDifferentAcrossEpochs) {
  EXPECT_EQ(epoch_indices(500, 2, 1, 10, 42, 5), epoch_indices(500, 2, 1, 10, 42, 5));
  EXPECT_NE(epoch_indices(500, 2, 1, 10, 42, 5), epoch_indices(500, 2, 1, 10, 42, 6));
  EXPECT_NE(epoch_indices(500, 2, 1, 10, 42, 5), epoch_indices(500, 2, 1, 10, 43, 5));
  // A permutation, not sorted.
  DistributedSampler s(500, 1, 0, 10, 42);
  auto p = s.permutation();
  EXPECT_FALSE(std::is_sorted(p.begin(), p.end()));
  std::sort(p.begin(), p.end());
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i], std::int32_t(i));
}

TEST(Sampler, GlobalBatchIndependentOfRankSplit) {
  // 1 rank x 64 and 2 ranks x 32 must train on the same images at every step.
  DistributedSampler one(1000, 1, 0, 64, 9);
  DistributedSampler r0(1000, 2, 0, 32, 9), r1(1000, 2, 1, 32, 9);
  ASSERT_EQ(one.steps_per_epoch(), r0.steps_per_epoch());
  for (int epoch : {0, 1}) {
    one.set_epoch(epoch);
    r0.set_epoch(epoch);
    r1.set_epoch(epoch);
    std::vector<std::int32_t> a(64), b(32), c(32);
    for (std::size_t k = 0; k < one.steps_per_epoch(); ++k) {
      one.step_indices(k, a.data());
      r0.step_indices(k, b.data());
      r1.step_indices(k, c.data());
      // Rank r's images are the r-th half of the one-rank batch, in order (micro-batch alignment).
      EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin())) << "epoch " << epoch << " step " << k;
      EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin() + 32)) << "epoch " << epoch;
    }
  }
}

TEST(Sampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 2, 2, 1, 0), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 2, 0, 8, 0), std::invalid_argument);  // no full batch
  DistributedSampler s(10, 1, 0, 5, 0);
  std::vector<std::int32_t> out(5);
  EXPECT_THROW(s.step_indices(2, out.data()), std::out_of_range);
}

TEST(Sampler, EvalShardsPartitionTheTestSet) {
  std::vector<int> count(103, 0);
  for (int r = 0; r < 4; ++r)
    for (std::int32_t i : eval_shard(103, 4, r)) ++count[i];
  for (int c : count) EXPECT_EQ(c, 1);
}

}  // namespace
}  // namespace gpurun::runtime

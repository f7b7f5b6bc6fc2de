// Pins the shared exchange's split shares (runtime/src/cpu/split_balance.h, private): starting
// edges even or by weight, every member keeping a block; the balance moving each boundary at most
// one block a step toward the speeds, settling where they say and not swinging around a target
// between two edges; the rates' running mean; and the refusals.
#include "cpu/split_balance.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace gpurun::runtime::cpu {
namespace {

TEST(SplitBalance, StartingEdgesAreEvenOrByWeight) {
  EXPECT_EQ(edges_for(32, {1, 1}), (Edges{0, 16, 32}));
  EXPECT_EQ(edges_for(32, {1, 3}), (Edges{0, 8, 32}));
  EXPECT_EQ(edges_for(21, {1, 1, 1}), (Edges{0, 7, 14, 21}));
  EXPECT_EQ(edges_for(10, {1, 2, 2}), (Edges{0, 2, 6, 10}));
}

TEST(SplitBalance, EveryMemberKeepsABlock) {
  EXPECT_EQ(edges_for(32, {1000, 1}), (Edges{0, 31, 32}));
  EXPECT_EQ(edges_for(32, {1, 1000}), (Edges{0, 1, 32}));
  EXPECT_EQ(edges_for(3, {1, 1000, 1}), (Edges{0, 1, 2, 3}));
  EXPECT_EQ(rebalance({0, 1, 32}, {1, 1000}, 0.6), (Edges{0, 1, 32}));
  EXPECT_EQ(rebalance({0, 1, 2, 3}, {1, 1, 1000}, 0.6), (Edges{0, 1, 2, 3}));
}

TEST(SplitBalance, MovesOneBlockAStepAndSettlesWhereTheSpeedsSay) {
  // Member 0 does 3 blocks' work in the time member 1 does 1: 24 of 32 blocks.
  Edges e{0, 16, 32};
  std::vector<Edges> path;
  for (int step = 0; step < 12; ++step) {
    path.push_back(e = rebalance(e, {3, 1}, 0.6));
  }
  for (int step = 0; step < 8; ++step) EXPECT_EQ(path[std::size_t(step)][1], 17 + step);
  for (int step = 8; step < 12; ++step) EXPECT_EQ(path[std::size_t(step)][1], 24);
  // Three members, the middle one slowest: both boundaries move toward it, one block each.
  EXPECT_EQ(rebalance({0, 10, 20, 30}, {2, 1, 2}, 0.6), (Edges{0, 11, 19, 30}));
}

TEST(SplitBalance, ATargetBetweenTwoEdgesDoesNotMakeThemSwing) {
  // 16.5 of 33 blocks: within the slack of both 16 and 17.
  EXPECT_EQ(rebalance({0, 16, 33}, {1, 1}, 0.6), (Edges{0, 16, 33}));
  EXPECT_EQ(rebalance({0, 17, 33}, {1, 1}, 0.6), (Edges{0, 17, 33}));
  // 16.7: moves from 16 only once the slack is below 0.7.
  EXPECT_EQ(rebalance({0, 16, 33}, {16.7, 16.3}, 0.6), (Edges{0, 17, 33}));
  EXPECT_EQ(rebalance({0, 16, 33}, {16.7, 16.3}, 0.75), (Edges{0, 16, 33}));
}

TEST(SplitBalance, TheRatesRunningMeanFollowsNewRatesByItsWeight) {
  RateFilter f(0.5);
  EXPECT_EQ(f.add({4, 8}), (std::vector<double>{4, 8}));
  EXPECT_EQ(f.add({8, 8}), (std::vector<double>{6, 8}));
  EXPECT_EQ(f.add({8, 0}), (std::vector<double>{7, 4}));
}

TEST(SplitBalance, RefusesWhatCannotBeShared) {
  EXPECT_THROW(edges_for(2, {1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(edges_for(8, {}), std::invalid_argument);
  EXPECT_THROW(edges_for(8, {1, 0}), std::invalid_argument);
  EXPECT_THROW(edges_for(8, {1, -2}), std::invalid_argument);
  EXPECT_THROW(rebalance({0, 4, 8}, {1, 1, 1}, 0.6), std::invalid_argument);
  EXPECT_THROW(rebalance({0, 4, 8}, {1, 0}, 0.6), std::invalid_argument);
}

}  // namespace
}  // namespace gpurun::runtime::cpu

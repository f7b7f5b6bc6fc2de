// split_balance.h (private): how the shared exchange (exchange_shared.cc) shares a split layer's
// column blocks among its members, and how it moves the boundaries toward the members' measured
// speeds. The blocks are fixed and every product is formed block by block, so where the
// boundaries fall changes who computes a block, never its bits.
#pragma once

#include <vector>

namespace gpurun::runtime::cpu {

// Member m owns blocks [edges[m], edges[m + 1]); edges[0] is 0, edges.back() the block count,
// and every member owns at least one block.
using Edges = std::vector<int>;

// The edges nearest to shares proportional to `weights` (one per member, each > 0) of `blocks`
// blocks. Throws std::invalid_argument when there are fewer blocks than members.
Edges edges_for(int blocks, const std::vector<double>& weights);

// Each inner edge moved by at most one block toward the shares proportional to `rates` (a
// member's work per second), and only when its target lies more than `slack` blocks away (so a
// target between two edges does not make the edge swing). Members keep at least one block.
Edges rebalance(const Edges& edges, const std::vector<double>& rates, double slack);

// Smooths per-member rates (an exponential moving average of the last few steps' rates).
class RateFilter {
 public:
  explicit RateFilter(double weight_of_new) : alpha_(weight_of_new) {}
  const std::vector<double>& add(const std::vector<double>& rates);

 private:
  double alpha_;
  std::vector<double> mean_;
};

}  // namespace gpurun::runtime::cpu

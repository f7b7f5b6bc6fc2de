// split_balance.cc: see split_balance.h.
#include "split_balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace gpurun::runtime::cpu {
namespace {

// Where each inner edge would lie with shares proportional to `weights` (not rounded).
std::vector<double> targets(int blocks, const std::vector<double>& weights) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<double> t(weights.size() + 1, 0.0);
  for (std::size_t m = 0; m < weights.size(); ++m) t[m + 1] = t[m] + weights[m];
  for (double& v : t) v *= blocks / total;
  return t;
}

void check(int blocks, const std::vector<double>& weights) {
  if (weights.empty() || int(weights.size()) > blocks) {
    throw std::invalid_argument("split: " + std::to_string(blocks) + " blocks cannot go to " +
                                std::to_string(weights.size()) + " members");
  }
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) {
      throw std::invalid_argument("split: a member's weight must be a positive number, got " +
                                  std::to_string(w));
    }
  }
}

}  // namespace

Edges edges_for(int blocks, const std::vector<double>& weights) {
  check(blocks, weights);
  const std::vector<double> t = targets(blocks, weights);
  const int members = int(weights.size());
  Edges e(t.size());
  e[0] = 0;
  e[members] = blocks;
  for (int q = 1; q < members; ++q) {
    // At least one block for each member before q and after it.
    e[q] = std::clamp(int(std::lround(t[q])), e[q - 1] + 1, blocks - (members - q));
  }
  return e;
}

Edges rebalance(const Edges& edges, const std::vector<double>& rates, double slack) {
  const int members = int(edges.size()) - 1;
  if (members < 1 || int(rates.size()) != members) {
    throw std::invalid_argument("split: " + std::to_string(rates.size()) + " rates for " +
                                std::to_string(members) + " members");
  }
  check(edges.back(), rates);
  const std::vector<double> t = targets(edges.back(), rates);
  Edges e = edges;
  for (int q = 1; q < members; ++q) {
    const int step = t[q] > edges[q] + slack ? 1 : t[q] < edges[q] - slack ? -1 : 0;
    e[q] = std::clamp(edges[q] + step, e[q - 1] + 1, edges[q + 1] - 1);
  }
  return e;
}

const std::vector<double>& RateFilter::add(const std::vector<double>& rates) {
  if (mean_.size() != rates.size()) {
    mean_ = rates;
  } else {
    for (std::size_t m = 0; m < rates.size(); ++m) mean_[m] += alpha_ * (rates[m] - mean_[m]);
  }
  return mean_;
}

}  // namespace gpurun::runtime::cpu

// node_loss.h: --nnodes MIN:MAX's rules (supervisor.h): which nodes an attempt says to leave out
// of the next one, and the allocation without them. The rule is deliberately simple:
//  - a node whose preflight failed is left out (before any program ran);
//  - after a failure mid-run, the failed rank's node is left out when that rank died (killed by
//    a signal, or its wrapper vanished) after every rank's program had started: the first failure
//    is the node that went, the others only follow from the stop. A rank that exited with a code
//    says nothing against its node, so it leaves none out.
// Pure; tests/launcher/node_loss_test.cc. Private to the gpurun binary.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/plan.h"
#include "supervisor/attempt.h"

namespace gpurun::launcher {

struct LeftOut {
  std::string host;
  std::string
      why;  // "rank 2 was killed by signal 9 (SIGKILL) after 3.1 s", "failed its preflight: ..."
};

// The nodes whose preflight reported a failure, in rank order.
std::vector<LeftOut> failed_preflight_nodes(const Attempt& a);
// The node the attempt's failure says died (the rule above), or nullopt.
std::optional<LeftOut> dead_node(const Attempt& a);
// `a` without the nodes named in `out` (order kept).
Allocation without_nodes(const Allocation& a, const std::vector<LeftOut>& out);
// Why the job cannot go on with `left` nodes under `r` (fewer than MIN), or nullopt.
std::optional<std::string> too_few_nodes(int left, const NodeRange& r);
// "1:2", or "2" when MIN == MAX: as --nnodes was given.
std::string to_string(const NodeRange& r);

}  // namespace gpurun::launcher

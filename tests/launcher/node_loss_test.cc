// node_loss_test.cc: --nnodes MIN:MAX's rules (launcher/src/supervisor/node_loss.h): a node whose
// preflight failed is left out; after a failure mid-run, the failed rank's node is left out only
// when that rank died (a signal, a vanished wrapper) after every rank had started; an exit code,
// a failure before the start or a hang leave none out; fewer than MIN nodes left is refused.
#include "supervisor/node_loss.h"

#include <gtest/gtest.h>

namespace gpurun::launcher {
namespace {

// Four ranks, two on each of node1 and node2, all running.
Attempt two_nodes_running() {
  Attempt a(4, 0);
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(a.on_hello(r, r < 2 ? "node1" : "node2"));
  for (int r = 0; r < 4; ++r) a.on_reach(r, "eth0", std::nullopt);
  for (int r = 0; r < 4; ++r) a.on_running(r, 100);
  return a;
}

TEST(NodeLoss, ARankKilledBySignalLeavesItsNodeOut) {
  Attempt a = two_nodes_running();
  ASSERT_TRUE(a.on_end(2));
  ASSERT_TRUE(a.fail_by_end(2, {0, 9, 12.4, ""}));
  // What follows from the stop is not the node that went.
  a.begin_stop();
  a.on_end(0);
  a.fail_by_end(0, {0, 15, 13, ""});
  std::optional<LeftOut> dead = dead_node(a);
  ASSERT_TRUE(dead);
  EXPECT_EQ(dead->host, "node2");
  EXPECT_EQ(dead->why, "rank 2 was killed by signal 9 (SIGKILL) after 12.4 s");
}

TEST(NodeLoss, ALostWrapperLeavesItsNodeOut) {
  Attempt a = two_nodes_running();
  ASSERT_TRUE(a.on_lost(3, 5));
  std::optional<LeftOut> dead = dead_node(a);
  ASSERT_TRUE(dead);
  EXPECT_EQ(dead->host, "node2");
  EXPECT_EQ(dead->why.rfind("rank 3 was lost", 0), 0u) << dead->why;
}

TEST(NodeLoss, AnExitCodeOrAnEarlyFailureLeavesNoNodeOut) {
  Attempt a = two_nodes_running();
  a.on_end(1);
  ASSERT_TRUE(a.fail_by_end(1, {1, 0, 3, ""}));
  EXPECT_FALSE(dead_node(a)) << "the program's own exit code: the same on any node";

  Attempt b(4, 0);
  for (int r = 0; r < 4; ++r) b.on_hello(r, r < 2 ? "node1" : "node2");
  ASSERT_TRUE(b.on_lost(3, 1));
  EXPECT_FALSE(dead_node(b)) << "before every rank ran: the start failed, not a node";

  Attempt c = two_nodes_running();
  c.fail(-1, "hangs", 124, 10);
  EXPECT_FALSE(dead_node(c)) << "the job as a whole";
}

TEST(NodeLoss, FailedPreflightNodesWithTheirReasons) {
  Attempt a(4, 0);
  for (int r = 0; r < 4; ++r) a.on_hello(r, r < 2 ? "node1" : "node2");
  a.expect_preflight({0, 2}, true);
  a.on_preflight(0, {{}, {"no nvidia-smi"}, -1});
  a.on_preflight(2,
                 {{"GPU 1 (rank 3): 3 uncorrected ECC errors", "TMPDIR has 1 MiB free"}, {}, -1});
  std::vector<LeftOut> bad = failed_preflight_nodes(a);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].host, "node2");
  EXPECT_EQ(
      bad[0].why,
      "failed its preflight: GPU 1 (rank 3): 3 uncorrected ECC errors; TMPDIR has 1 MiB free");
}

TEST(NodeLoss, WithoutNodesAndTooFew) {
  Allocation a;
  a.nodes = {{"node1", 2, 2}, {"node2", 2, 2}, {"node3", 2, 2}};
  Allocation b = without_nodes(a, {{"node2", "died"}});
  ASSERT_EQ(b.nodes.size(), 2u);
  EXPECT_EQ(b.nodes[0].host, "node1");
  EXPECT_EQ(b.nodes[1].host, "node3");
  EXPECT_FALSE(too_few_nodes(1, {1, 2}));
  EXPECT_EQ(too_few_nodes(1, {2, 2}).value_or(""),
            "1 node would be left, fewer than --nnodes 2 allows");
  EXPECT_EQ(too_few_nodes(0, {1, 2}).value_or(""),
            "0 nodes would be left, fewer than --nnodes 1:2 allows");
}

}  // namespace
}  // namespace gpurun::launcher

// hostlist_test.cc: Slurm hostlist semantics, driven by the shared vectors (hostlist_vectors.tsv,
// drawn from Slurm, python-hostlist, submitit, TensorFlow, Lightning) and more from Slurm's docs.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "gpurun/launcher/error.h"
#include "gpurun/launcher/hostlist.h"
#include "test_support.h"

using namespace gpurun::launcher;

namespace {

struct Vector {
  std::string expr, expected;
  int line;
};

std::vector<Vector> load(const std::string& file) {
  std::ifstream f(fixtures::data(file));
  EXPECT_TRUE(f) << file;
  std::vector<Vector> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    auto tab = line.find('\t');
    if (tab == std::string::npos) continue;
    out.push_back({line.substr(0, tab), line.substr(tab + 1), n});
  }
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& h : v) s += (s.empty() ? "" : ",") + h;
  return s;
}

void check_file(const std::string& file, std::size_t min_cases) {
  auto vectors = load(file);
  ASSERT_GE(vectors.size(), min_cases);
  int errors = 0;
  for (const auto& v : vectors) {
    SCOPED_TRACE(file + ":" + std::to_string(v.line) + " '" + v.expr + "'");
    if (v.expected == "ERROR") {
      ++errors;
      EXPECT_THROW(expand_hostlist(v.expr), HostlistError);
      continue;
    }
    auto hosts = expand_hostlist(v.expr);
    EXPECT_EQ(joined(hosts), v.expected);
    // compress must round-trip: expanding its output gives back exactly the same list.
    std::string c = compress_hostlist(hosts);
    EXPECT_EQ(joined(expand_hostlist(c)), v.expected) << "compressed to " << c;
  }
  EXPECT_GT(errors, 0);
}

}  // namespace

TEST(Hostlist, SharedVectors) {
  check_file("hostlist_vectors.tsv", 30);
}
TEST(Hostlist, SlurmDocVectors) {
  check_file("hostlist_more.tsv", 20);
}

TEST(Hostlist, ErrorPointsAtOffendingCharacter) {
  try {
    expand_hostlist("gpu[01-1x]");
    FAIL() << "no error";
  } catch (const HostlistError& e) {
    EXPECT_EQ(e.position(), 8u);
    EXPECT_NE(e.pointer().find("        ^"), std::string::npos) << e.pointer();
  }
  try {
    expand_hostlist("n[3-1]");
    FAIL();
  } catch (const HostlistError& e) {
    EXPECT_NE(std::string(e.what()).find("below its start"), std::string::npos);
  }
}

TEST(Hostlist, CompressIsShortest) {
  EXPECT_EQ(compress_hostlist({"n1", "n2", "n3", "n5"}), "n[1-3,5]");
  EXPECT_EQ(compress_hostlist({"n09", "n10", "n11"}), "n[09-11]");
  EXPECT_EQ(compress_hostlist({"n9", "n10"}), "n[9-10]");
  EXPECT_EQ(compress_hostlist({"lx10-ib", "lx11-ib"}), "lx[10-11]-ib");
  EXPECT_EQ(compress_hostlist({"login", "n1"}), "login,n1");
  EXPECT_EQ(compress_hostlist({"n3", "n1"}), "n[3,1]");
  EXPECT_THROW(compress_hostlist({"bad[host"}), HostlistError);
  EXPECT_THROW(compress_hostlist({""}), HostlistError);
}

TEST(Hostlist, TenThousandHosts) {
  auto hosts = expand_hostlist("node[00001-10000]");
  ASSERT_EQ(hosts.size(), 10000u);
  EXPECT_EQ(hosts.front(), "node00001");
  EXPECT_EQ(hosts.back(), "node10000");
  EXPECT_EQ(compress_hostlist(hosts), "node[00001-10000]");
}

TEST(Hostlist, RandomListsRoundTrip) {
  std::mt19937 rng(7);
  const char* prefixes[] = {"n", "gpu", "rack1-node", "x", "login"};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::string> hosts;
    int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      std::string p = prefixes[rng() % 5];
      int width = 1 + static_cast<int>(rng() % 4);
      int v = static_cast<int>(rng() % 120);
      std::string num = std::to_string(v);
      if (static_cast<int>(num.size()) < width) num = std::string(width - num.size(), '0') + num;
      hosts.push_back(p + num + (rng() % 7 == 0 ? "-ib" : ""));
    }
    std::string c = compress_hostlist(hosts);
    ASSERT_EQ(expand_hostlist(c), hosts) << c;
  }
}

TEST(TasksPerNode, SlurmSyntax) {
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("3(x2),2,11(x4)"), (std::vector<int>{3, 3, 2, 11, 11, 11, 11}));
  EXPECT_EQ(expand_tasks_per_node("13(x10)").size(), 10u);
  EXPECT_EQ(expand_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(compress_tasks_per_node({2, 2, 2, 1}), "2(x3),1");
  for (const char* bad : {"", "2(x)", "(x3)", "2(3)", "2(x3", "2,", "a", "2(x0)", "2 ,1"})
    EXPECT_THROW(expand_tasks_per_node(bad), HostlistError) << bad;
}

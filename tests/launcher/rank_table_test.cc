// The rank table gpurun hands each wrapper (rank_table.h): carried whole, never re-planned,
// refused from another format, and every malformed table is an Error that names what is wrong.
#include "control/rank_table.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gpurun/launcher/error.h"
#include "gpurun/launcher/plan.h"
#include "test_support.h"

using namespace gpurun::launcher;
using fixtures::fixture;
using nlohmann::json;

namespace {

RankTable table_of(const std::string& env_fixture, const PlanOptions& o = {}) {
  Allocation a = detect_allocation(fixture(env_fixture));
  return RankTable{a.scheduler, a.job_id, make_plan(a, o), WrapperSettings{12.5}};
}

// decode(text) must throw Error (not another exception) whose text holds `want`.
void expect_refused(const std::string& text, const std::string& want) {
  try {
    decode_rank_table(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
        << "for " << text << "\nsaid: " << e.what() << "\nwanted: " << want;
  }
}

}  // namespace

TEST(RankTable, RoundTripsEveryField) {
  PlanOptions o;
  o.gpus_per_rank = 0;
  RankTable t = table_of("slurm_batch.env", o);
  t.plan.stdout_tty = true;
  RankTable d = decode_rank_table(encode_rank_table(t));
  EXPECT_EQ(d.wrapper.kill_grace, 12.5);  // --kill-grace reaches every rank's wrapper
  EXPECT_EQ(d.scheduler, Scheduler::slurm);
  EXPECT_EQ(d.job_id, "777");
  EXPECT_TRUE(d.plan.stdout_tty);
  EXPECT_EQ(d.plan.master_addr, t.plan.master_addr);
  EXPECT_EQ(d.plan.master_port, t.plan.master_port);
  EXPECT_EQ(d.plan.cpus_per_rank, t.plan.cpus_per_rank);
  ASSERT_EQ(d.plan.world_size, t.plan.world_size);
  ASSERT_EQ(d.plan.ranks.size(), t.plan.ranks.size());
  for (std::size_t r = 0; r < t.plan.ranks.size(); ++r) {
    const RankEntry &a = t.plan.ranks[r], &b = d.plan.ranks[r];
    EXPECT_EQ(b.rank, a.rank);
    EXPECT_EQ(b.node_rank, a.node_rank);
    EXPECT_EQ(b.local_rank, a.local_rank);
    EXPECT_EQ(b.local_world_size, a.local_world_size);
    EXPECT_EQ(b.host, a.host);
    EXPECT_EQ(b.gpus, a.gpus);
  }
  ASSERT_EQ(d.plan.nodes.size(), t.plan.nodes.size());
  for (std::size_t i = 0; i < t.plan.nodes.size(); ++i) {
    EXPECT_EQ(d.plan.nodes[i].host, t.plan.nodes[i].host);
    EXPECT_EQ(d.plan.nodes[i].ranks, t.plan.nodes[i].ranks);
    EXPECT_EQ(d.plan.nodes[i].gpus, t.plan.nodes[i].gpus);
    EXPECT_EQ(d.plan.nodes[i].first_rank, t.plan.nodes[i].first_rank);
  }
  t.job_id.reset();
  EXPECT_FALSE(decode_rank_table(encode_rank_table(t)).job_id);
  // --contract reaches every wrapper, which sets the environment from it.
  for (const char* c : {"torch,tf,jax", "torch", "tf", "jax,tf"}) {
    t.plan.contracts = parse_contracts(c);
    EXPECT_EQ(to_string(decode_rank_table(encode_rank_table(t)).plan.contracts),
              to_string(parse_contracts(c)));
  }
  EXPECT_EQ(to_string(parse_contracts("jax,tf")), "tf,jax");
}

// Torque's PBS_GPUFILE names every node's GPUs: the wrapper on each node gets its node's list.
// Odd characters survive (the old %XX text format needed escapes for them).
TEST(RankTable, CarriesEachNodesGpuIds) {
  Allocation a = detect_allocation(fixture("torque.env"));
  a.nodes[0].gpu_ids = {"GPU-a+b*c;%=\" ,", "1"};
  RankTable t{a.scheduler, a.job_id, make_plan(a, {}), {}};
  RankTable d = decode_rank_table(encode_rank_table(t));
  ASSERT_EQ(d.plan.nodes.size(), t.plan.nodes.size());
  for (std::size_t i = 0; i < t.plan.nodes.size(); ++i)
    EXPECT_EQ(d.plan.nodes[i].gpu_ids, a.nodes[i].gpu_ids);
  EXPECT_FALSE(d.plan.nodes[1].gpu_ids.empty()) << "PBS_GPUFILE's ids of the second node";
}

// The wrapper takes the rows as written: a table make_plan would never produce (GPUs handed out
// in reverse, an uneven split) comes back unchanged, where re-planning gave make_plan's answer.
TEST(RankTable, NothingIsReplanned) {
  const std::string text = json{
      {"gpurun_rank_table", kRankTableFormat}, {"gpurun", "test"}, {"scheduler", "local"},
      {"job_id", nullptr}, {"master_addr", "h1"}, {"master_port", 29500},
      {"cpus_per_rank", 3}, {"stdout_tty", false}, {"kill_grace_ms", 250},
      {"contracts", "jax,torch"}, {"world_size", 3},
      {"nodes", {{{"host", "h1"}, {"gpus", 4}, {"gpu_ids", json::array()},
                  {"ranks", {{0, 0, {3, 2}}, {1, 1, {1, 0}}}}},
                 {{"host", "h2"}, {"gpus", 1}, {"gpu_ids", {"GPU-x"}}, {"ranks", {{2, 0, {0}}}}}}}}
                               .dump();
  RankTable d = decode_rank_table(text);
  ASSERT_EQ(d.plan.ranks.size(), 3u);
  EXPECT_EQ(d.plan.ranks[0].gpus, (std::vector<int>{3, 2}));
  EXPECT_EQ(d.plan.ranks[1].gpus, (std::vector<int>{1, 0}));
  EXPECT_EQ(d.plan.ranks[1].local_world_size, 2);
  EXPECT_EQ(d.plan.ranks[2].host, "h2");
  EXPECT_EQ(d.plan.ranks[2].node_rank, 1);
  EXPECT_EQ(d.plan.nodes[1].first_rank, 2);
  EXPECT_EQ(d.plan.nodes[1].gpu_ids, (std::vector<std::string>{"GPU-x"}));
  EXPECT_EQ(d.plan.cpus_per_rank, 3);
  EXPECT_DOUBLE_EQ(d.wrapper.kill_grace, 0.25);
  EXPECT_TRUE(d.plan.contracts.torch && d.plan.contracts.jax && !d.plan.contracts.tf);
}

TEST(RankTable, AnotherFormatIsRefusedNamingBothVersions) {
  expect_refused("v1;s=slurm;j=1;a=x;p=1;c=1;g=-;n=host*2*0",
                 "the rank table is format 1 from an older gpurun");
  json j = json::parse(encode_rank_table(table_of("slurm_batch.env")));
  j["gpurun_rank_table"] = kGroupedRankTableFormat + 1;
  j["gpurun"] = "9.9.9";
  expect_refused(j.dump(), "is format 6 from gpurun 9.9.9, but this rank wrapper is gpurun ");
  expect_refused(j.dump(), "run the same gpurun build on every node");
}

// Each malformed table is an Error naming what is wrong (a bad %XX escape in the old format threw
// a bare std::invalid_argument "stoi" past the wrapper's catch).
TEST(RankTable, MalformedTablesAreErrorsThatSayWhy) {
  const json good = json::parse(encode_rank_table(table_of("slurm_batch.env")));
  auto with = [&](const std::string& ptr, const json& v) {
    json j = good;
    j[json::json_pointer(ptr)] = v;
    return j.dump();
  };
  auto without = [&](const std::string& key) {
    json j = good;
    j.erase(key);
    return j.dump();
  };
  expect_refused("", "not JSON");
  expect_refused("{\"gpurun_rank_table\":2,", "not JSON");
  expect_refused("[1,2]", "not a JSON object");
  expect_refused("{}", "no \"gpurun_rank_table\" format number");
  expect_refused(without("master_addr"), "the table has no \"master_addr\"");
  expect_refused(with("/master_port", "29500"), "\"master_port\" is a string of the wrong kind");
  expect_refused(with("/master_port", 70000), "master_port (1-65535)");
  expect_refused(with("/scheduler", "cron"), "rank table scheduler");
  expect_refused(with("/nodes", json::array()), "the table has no nodes");
  expect_refused(with("/nodes/0/ranks/0", "0"), "row 0 of node01 is not [rank, local rank");
  expect_refused(with("/nodes/0/ranks/0/2", {0, "x"}), "row 0 of node01 is not");
  expect_refused(with("/nodes/0/ranks/1/1", 0), "has local rank 0, expected 1");
  expect_refused(with("/nodes/0/ranks/0/2", {7}), "has GPU position 7, but node01 has 2 GPUs");
  expect_refused(with("/nodes/0/ranks/1/0", 0), "row 1 is rank 0: ranks must run 0..6 in order");
  expect_refused(with("/world_size", 8), "the table has 7 rank rows for a world of 8");
  expect_refused(with("/nodes/1/host", ""), "node 1 needs a host");
  expect_refused(with("/nodes/1", 5), "node 1 has no \"host\"");
  expect_refused(without("contracts"), "the table has no \"contracts\"");
  expect_refused(with("/contracts", "torch,mpi"), "\"contracts\" 'torch,mpi' is not a list of");
  // Long input is quoted only in part.
  const std::string junk(100000, '{');
  try {
    decode_rank_table(junk);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u);
  }
}

// A table too long for one argument is an error at gpurun, not an E2BIG at the engine.
TEST(RankTable, TooLongForOneArgumentIsAnError) {
  Allocation a;
  a.scheduler = Scheduler::local;
  // Host names no hostlist shortens (60 bytes each, distinct, no number in them).
  for (int i = 0; i < 3000; ++i)
    a.nodes.push_back({fmt::format("{:c}{:c}{:c}{}", 'a' + i % 26, 'a' + i / 26 % 26,
                                   'a' + i / 676 % 26, std::string(57, 'x')),
                       8, 8});
  RankTable t{a.scheduler, std::nullopt, make_plan(a, {}), {}};
  try {
    encode_rank_table(t);
    ADD_FAILURE() << "a table of 24000 ranks was encoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than one command-line argument carries"),
              std::string::npos)
        << e.what();
  }
  a.nodes.resize(64);  // 512 ranks fit
  EXPECT_NO_THROW(encode_rank_table({a.scheduler, std::nullopt, make_plan(a, {}), {}}));
}

// 131,072 GPU-less ranks on one machine (the control-plane benchmark) fit as format 4, whose
// rows are counted; a table that fits as format 3 stays format 3.
TEST(RankTable, ManyGpuLessRanksAreCounted) {
  Allocation a;
  a.scheduler = Scheduler::local;
  a.nodes.push_back({"vm", 131072, 0});
  PlanOptions o;
  o.ntasks = 131072;
  o.contracts = parse_contracts("torch");
  RankTable t{a.scheduler, std::nullopt, make_plan(a, o), {}};
  const std::string text = encode_rank_table(t);
  EXPECT_NE(text.find("\"gpurun_rank_table\":4"), std::string::npos) << text.substr(0, 80);
  RankTable d = decode_rank_table(text);
  ASSERT_EQ(d.plan.ranks.size(), 131072u);
  EXPECT_EQ(d.plan.ranks[131071].rank, 131071);
  EXPECT_EQ(d.plan.ranks[131071].local_rank, 131071);
  EXPECT_EQ(d.plan.ranks[5].host, "vm");
  a.nodes[0].slots = 4;
  o.ntasks = 4;
  EXPECT_NE(encode_rank_table({a.scheduler, std::nullopt, make_plan(a, o), {}})
                .find("\"gpurun_rank_table\":3"),
            std::string::npos);
}

// 16,384 nodes of 8 GPUs, a rank a GPU (131,072 ranks, as the README's control plane claims): one
// entry of format 5. 1,024 such nodes were refused (140 kB of rows). Irregular nodes (2 ranks on
// the last) keep their rows beside the group.
TEST(RankTable, ManyNodesAlikeAreOneGroup) {
  Allocation a;
  a.scheduler = Scheduler::slurm;
  for (int i = 0; i < 16384; ++i)
    a.nodes.push_back({fmt::format("gpu{:05}", i), 8, 8, {"0", "1", "2", "3", "4", "5", "6", "7"}});
  PlanOptions o;
  o.gpus_per_rank = 1;
  RankTable t{a.scheduler, std::string("77"), make_plan(a, o), {}};
  ASSERT_EQ(t.plan.world_size, 131072);
  const std::string text = encode_rank_table(t);
  EXPECT_NE(text.find("\"gpurun_rank_table\":5"), std::string::npos) << text.substr(0, 80);
  EXPECT_LT(text.size(), 1000u);
  RankTable d = decode_rank_table(text);
  ASSERT_EQ(d.plan.ranks.size(), t.plan.ranks.size());
  ASSERT_EQ(d.plan.nodes.size(), t.plan.nodes.size());
  for (std::size_t i = 0; i < t.plan.ranks.size(); i += 997) {
    EXPECT_EQ(d.plan.ranks[i].host, t.plan.ranks[i].host);
    EXPECT_EQ(d.plan.ranks[i].local_rank, t.plan.ranks[i].local_rank);
    EXPECT_EQ(d.plan.ranks[i].gpus, t.plan.ranks[i].gpus);
    EXPECT_EQ(d.plan.ranks[i].node_rank, t.plan.ranks[i].node_rank);
  }
  EXPECT_EQ(d.plan.nodes[16383].gpu_ids, t.plan.nodes[16383].gpu_ids);
  EXPECT_EQ(d.plan.ranks[131071].gpus, std::vector<int>{7});

  a.nodes.back().slots = 2;  // an odd last node: its own rows
  o.ntasks = 16383 * 8 + 2;
  RankTable odd{a.scheduler, std::string("77"), make_plan(a, o), {}};
  RankTable back = decode_rank_table(encode_rank_table(odd));
  ASSERT_EQ(back.plan.world_size, odd.plan.world_size);
  EXPECT_EQ(back.plan.ranks.back().host, "gpu16383");
  EXPECT_EQ(back.plan.ranks.back().local_rank, 1);
  // A group that claims more GPUs than its nodes have is refused.
  std::string bad = encode_rank_table(t);
  const auto at = bad.find("\"gpus_per_rank\":1");
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, 17, "\"gpus_per_rank\":2");
  expect_refused(bad, "has 8 ranks of 2 GPUs each, on nodes of 8 GPUs");
  // A small hostile group must not make a wrapper build billions of GPU positions.
  json hostile = json::parse(encode_rank_table(t));
  hostile["world_size"] = 65536;
  hostile["nodes"] = json::array({{{"hosts", "h[1-65536]"},
                                   {"gpus", 65536},
                                   {"gpu_ids", json::array()},
                                   {"ranks", 1},
                                   {"gpus_per_rank", 65536}}});
  expect_refused(hostile.dump(), "makes more than 1048576 ranks or 16777216 GPU positions");
  hostile["nodes"][0]["gpus"] = 2147483647;
  hostile["nodes"][0]["gpus_per_rank"] = 2147483647;
  expect_refused(hostile.dump(), "has 1 ranks of 2147483647 GPUs each");
}

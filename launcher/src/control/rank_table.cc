// rank_table.cc: the rank table's JSON form (rank_table.h).
#include "control/rank_table.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "gpurun/launcher/error.h"
#include "gpurun/launcher/hostlist.h"
#include "gpurun_version.h"

namespace gpurun::launcher {
namespace {

using nlohmann::json;

// Linux's limit on one argument (MAX_ARG_STRLEN, 32 pages), less room for the rest of the line.
constexpr std::size_t kMaxTableBytes = 120 * 1024;
constexpr int kMaxCountedRanks = 1 << 20;  // a count beyond any plan: a corrupt table
// A group's GPU positions in all (16 a rank on 1,048,576 ranks): a 200-byte format-5 table could
// otherwise ask a wrapper for billions of them.
constexpr int64_t kMaxGroupGpuPositions = int64_t{1} << 24;

// Written in this field order, so a reader sees the format first.
using ordered = nlohmann::ordered_json;

enum class Rows { kEach, kCountWhereTrivial, kGrouped };

ordered node_json(const PlanNode& n, const RankPlan& p, Rows form) {
  ordered rows = ordered::array();
  bool trivial = true;
  for (int r = n.first_rank; r < n.first_rank + n.ranks; ++r) {
    const RankEntry& e = p.ranks.at(static_cast<std::size_t>(r));
    rows.push_back(ordered::array({e.rank, e.local_rank, e.gpus}));
    trivial = trivial && e.rank == r && e.local_rank == r - n.first_rank && e.gpus.empty();
  }
  ordered out = {{"host", n.host}, {"gpus", n.gpus}, {"gpu_ids", n.gpu_ids}};
  if (form == Rows::kCountWhereTrivial && trivial)
    out["ranks"] = n.ranks;
  else
    out["ranks"] = std::move(rows);
  return out;
}

// k when node n's rows are [first + i, i, [i*k .. i*k + k - 1]] (k = 0: no GPUs), else -1.
int regular_gpus_per_rank(const PlanNode& n, const RankPlan& p) {
  const auto& first = p.ranks.at(static_cast<std::size_t>(n.first_rank));
  const int k = static_cast<int>(first.gpus.size());
  for (int i = 0; i < n.ranks; ++i) {
    const RankEntry& e = p.ranks.at(static_cast<std::size_t>(n.first_rank + i));
    if (e.rank != n.first_rank + i || e.local_rank != i || static_cast<int>(e.gpus.size()) != k)
      return -1;
    for (int g = 0; g < k; ++g)
      if (e.gpus[static_cast<std::size_t>(g)] != i * k + g) return -1;
  }
  return k;
}

// Format 5's nodes: each run of regular nodes alike as one entry with a hostlist; the others as
// format 4 writes them.
ordered grouped_nodes(const RankPlan& p) {
  ordered out = ordered::array();
  std::size_t i = 0;
  while (i < p.nodes.size()) {
    const PlanNode& n = p.nodes[i];
    const int k = regular_gpus_per_rank(n, p);
    std::vector<std::string> hosts{n.host};
    std::size_t j = i + 1;
    for (; k >= 0 && j < p.nodes.size(); ++j) {
      const PlanNode& m = p.nodes[j];
      if (m.ranks != n.ranks || m.gpus != n.gpus || m.gpu_ids != n.gpu_ids ||
          regular_gpus_per_rank(m, p) != k)
        break;
      hosts.push_back(m.host);
    }
    if (k < 0 || hosts.size() == 1) {
      out.push_back(node_json(n, p, Rows::kCountWhereTrivial));
      i += 1;
      continue;
    }
    out.push_back({{"hosts", compress_hostlist(hosts)},
                   {"gpus", n.gpus},
                   {"gpu_ids", n.gpu_ids},
                   {"ranks", n.ranks},
                   {"gpus_per_rank", k}});
    i = j;
  }
  return out;
}

// What a malformed table is called in errors: where it came from and how it starts.
Error bad_table(const std::string& text, const std::string& why) {
  const std::string start = text.size() > 60 ? text.substr(0, 60) + "..." : text;
  return Error(fmt::format("_rank --plan '{}': {}", start, why));
}

// Refuses a table of another format, naming both versions.
void check_format(const std::string& text, const json& j) {
  const auto f = j.find("gpurun_rank_table");
  if (f == j.end() || !f->is_number_integer())
    throw bad_table(text, "not a gpurun rank table (no \"gpurun_rank_table\" format number)");
  if (f->get<int>() >= kRankTableFormat && f->get<int>() <= kGroupedRankTableFormat) return;
  const auto v = j.find("gpurun");
  throw Error(fmt::format(
      "_rank: the rank table is format {} from gpurun {}, but this rank wrapper is gpurun {} and "
      "reads formats {} to {}: run the same gpurun build on every node",
      f->get<int>(), v != j.end() && v->is_string() ? v->get<std::string>() : "(unknown)",
      common::project_version(), kRankTableFormat, kGroupedRankTableFormat));
}

// j[key] as a T, or an Error naming the field.
template <class T>
T field(const json& j, const std::string& key, const std::string& where) {
  const auto it = j.is_object() ? j.find(key) : j.end();
  if (it == j.end()) throw Error(fmt::format("{} has no \"{}\"", where, key));
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw Error(fmt::format("{}'s \"{}\" is a {} of the wrong kind", where, key, it->type_name()));
  }
}

// Row `i` of node `n`: [rank, local rank, [GPU positions]].
RankEntry read_row(const json& row, std::size_t i, const PlanNode& n, int node_rank) {
  const std::string shape =
      fmt::format("row {} of {} is not [rank, local rank, [GPU positions]]", i, n.host);
  if (!row.is_array() || row.size() != 3) throw Error(shape);
  RankEntry e{0, node_rank, 0, n.ranks, n.host, {}};
  try {
    e.rank = row[0].get<int>();
    e.local_rank = row[1].get<int>();
    e.gpus = row[2].get<std::vector<int>>();
  } catch (const json::exception&) {
    throw Error(shape);
  }
  if (e.local_rank != static_cast<int>(i))
    throw Error(fmt::format("rank {} on {} has local rank {}, expected {}", e.rank, n.host,
                            e.local_rank, i));
  for (int g : e.gpus)
    if (g < 0 || g >= n.gpus)
      throw Error(fmt::format("rank {} has GPU position {}, but {} has {} GPUs", e.rank, g, n.host,
                              n.gpus));
  return e;
}

// Adds node `node_rank`'s rows to `t.plan`.
void read_node(const json& jn, int node_rank, RankTable& t) {
  const std::string where = fmt::format("node {}", node_rank);
  PlanNode n{field<std::string>(jn, "host", where), 0, field<int>(jn, "gpus", where),
             static_cast<int>(t.plan.ranks.size()),
             field<std::vector<std::string>>(jn, "gpu_ids", where)};
  std::vector<json> rows;
  if (jn.contains("ranks") && jn["ranks"].is_number_integer()) {  // format 4's count
    const int count = jn["ranks"].get<int>();
    if (count < 1 || count > kMaxCountedRanks)
      throw Error(fmt::format("{} has {} ranks", where, count));
    for (int i = 0; i < count; ++i)
      rows.push_back(json::array({n.first_rank + i, i, json::array()}));
  } else {
    rows = field<std::vector<json>>(jn, "ranks", where);
  }
  n.ranks = static_cast<int>(rows.size());
  if (n.host.empty() || n.gpus < 0 || n.ranks < 1)
    throw Error(where + " needs a host, a GPU count >= 0 and at least one rank");
  for (std::size_t i = 0; i < rows.size(); ++i)
    t.plan.ranks.push_back(read_row(rows[i], i, n, node_rank));
  t.plan.nodes.push_back(std::move(n));
}

// Adds the nodes of format 5's entry {"hosts", "gpus", "gpu_ids", "ranks", "gpus_per_rank"}.
void read_group(const json& jg, RankTable& t) {
  const std::string where = fmt::format("the node group at node {}", t.plan.nodes.size());
  const int count = field<int>(jg, "ranks", where), k = field<int>(jg, "gpus_per_rank", where);
  const int gpus = field<int>(jg, "gpus", where);
  if (count < 1 || count > kMaxCountedRanks || k < 0 || gpus > kMaxNodeSlots ||
      int64_t{count} * k > gpus)
    throw Error(
        fmt::format("{} has {} ranks of {} GPUs each, on nodes of {} GPUs", where, count, k, gpus));
  int64_t gpu_positions = 0;
  json node = {{"gpus", gpus}, {"gpu_ids", field<std::vector<std::string>>(jg, "gpu_ids", where)}};
  for (const std::string& host : expand_hostlist(field<std::string>(jg, "hosts", where))) {
    // Bounded as a spelled-out table is by its length: the ranks, and the GPU positions they
    // hold.
    if (t.plan.ranks.size() + std::size_t(count) > std::size_t(kMaxCountedRanks) ||
        (gpu_positions += int64_t{count} * k) > kMaxGroupGpuPositions)
      throw Error(fmt::format("{} makes more than {} ranks or {} GPU positions", where,
                              kMaxCountedRanks, kMaxGroupGpuPositions));
    json rows = json::array();
    const int first = static_cast<int>(t.plan.ranks.size());
    for (int i = 0; i < count; ++i) {
      json gpus = json::array();
      for (int g = 0; g < k; ++g) gpus.push_back(i * k + g);
      rows.push_back(json::array({first + i, i, std::move(gpus)}));
    }
    node["host"] = host;
    node["ranks"] = std::move(rows);
    read_node(node, static_cast<int>(t.plan.nodes.size()), t);
  }
}

// Every rank 0..world_size-1 exactly once, each node's ranks consecutive (the plan's order).
void check_ranks(const RankPlan& p) {
  if (p.world_size < 1 || static_cast<int>(p.ranks.size()) != p.world_size)
    throw Error(fmt::format("the table has {} rank rows for a world of {}", p.ranks.size(),
                            p.world_size));
  for (std::size_t i = 0; i < p.ranks.size(); ++i)
    if (p.ranks[i].rank != static_cast<int>(i))
      throw Error(fmt::format("row {} is rank {}: ranks must run 0..{} in order", i,
                              p.ranks[i].rank, p.world_size - 1));
}

RankTable read_table(const json& j) {
  RankTable t;
  const std::string w = "the table";
  t.scheduler = parse_scheduler(field<std::string>(j, "scheduler", w), "rank table scheduler");
  if (!j.contains("job_id") || !j["job_id"].is_null())
    t.job_id = field<std::string>(j, "job_id", w);
  RankPlan& p = t.plan;
  p.master_addr = field<std::string>(j, "master_addr", w);
  p.master_port = field<int>(j, "master_port", w);
  p.cpus_per_rank = field<int>(j, "cpus_per_rank", w);
  p.stdout_tty = field<bool>(j, "stdout_tty", w);
  p.world_size = field<int>(j, "world_size", w);
  const int grace_ms = field<int>(j, "kill_grace_ms", w);
  if (p.master_addr.empty() || p.master_port < 1 || p.master_port > 65535 ||
      p.cpus_per_rank < 1 || grace_ms < 0)
    throw Error("master_addr, master_port (1-65535), cpus_per_rank (>= 1) or kill_grace_ms (>= 0) "
                "is out of range");
  t.wrapper.kill_grace = grace_ms / 1000.0;
  const auto contracts = field<std::string>(j, "contracts", w);
  try {
    p.contracts = parse_contracts(contracts);
  } catch (const Error&) {
    throw Error(fmt::format("\"contracts\" '{}' is not a list of torch, tf and jax", contracts));
  }
  const auto nodes = field<std::vector<json>>(j, "nodes", w);
  if (nodes.empty()) throw Error("the table has no nodes");
  for (const json& n : nodes) {
    if (n.is_object() && n.contains("hosts"))
      read_group(n, t);
    else
      read_node(n, static_cast<int>(t.plan.nodes.size()), t);
  }
  check_ranks(p);
  return t;
}

std::string encode_as(const RankTable& t, Rows form) {
  const RankPlan& p = t.plan;
  ordered nodes = ordered::array();
  if (form == Rows::kGrouped)
    nodes = grouped_nodes(p);
  else
    for (const auto& n : p.nodes) nodes.push_back(node_json(n, p, form));
  const int format = form == Rows::kEach                ? kRankTableFormat
                     : form == Rows::kCountWhereTrivial ? kCompactRankTableFormat
                                                        : kGroupedRankTableFormat;
  const ordered j = {{"gpurun_rank_table", format},
                     {"gpurun", common::project_version()},
                     {"scheduler", to_string(t.scheduler)},
                     {"job_id", t.job_id ? ordered(*t.job_id) : ordered(nullptr)},
                     {"master_addr", p.master_addr},
                     {"master_port", p.master_port},
                     {"cpus_per_rank", p.cpus_per_rank},
                     {"stdout_tty", p.stdout_tty},
                     {"kill_grace_ms", std::llround(t.wrapper.kill_grace * 1000)},
                     {"contracts", to_string(p.contracts)},
                     {"world_size", p.world_size},
                     {"nodes", std::move(nodes)}};
  return j.dump(-1, ' ', false, ordered::error_handler_t::replace);
}

}  // namespace

std::string encode_rank_table(const RankTable& t) {
  std::string text = encode_as(t, Rows::kEach);
  if (text.size() > kMaxTableBytes) text = encode_as(t, Rows::kCountWhereTrivial);
  if (text.size() > kMaxTableBytes) text = encode_as(t, Rows::kGrouped);
  if (text.size() > kMaxTableBytes)
    throw Error(fmt::format(
        "the rank table of {} ranks on {} nodes is {} bytes, more than one command-line argument "
        "carries ({} bytes)",
        t.plan.world_size, t.plan.nodes.size(), text.size(), kMaxTableBytes));
  return text;
}

RankTable decode_rank_table(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    if (text.rfind("v1;", 0) == 0)  // gpurun before the table was JSON
      throw Error(fmt::format(
          "_rank: the rank table is format 1 from an older gpurun, but this rank wrapper is gpurun "
          "{} and reads format {}: run the same gpurun build on every node",
          common::project_version(), kRankTableFormat));
    throw bad_table(text, "not a gpurun rank table (not JSON)");
  }
  if (!j.is_object()) throw bad_table(text, "not a gpurun rank table (not a JSON object)");
  check_format(text, j);
  try {
    return read_table(j);
  } catch (const json::exception& e) {
    throw bad_table(text, fmt::format("malformed: {}", e.what()));
  } catch (const Error& e) {
    throw bad_table(text, e.what());
  }
}

}  // namespace gpurun::launcher

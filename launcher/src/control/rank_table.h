// rank_table.h: the finished rank table gpurun hands every rank's wrapper (`gpurun _rank --plan`).
// gpurun plans once; the table carries the plan's rows whole (each node's host, GPU ids and ranks
// with their local rank and GPU positions), so a wrapper looks its rank up and plans nothing.
// The text is one line of JSON with a format version: a wrapper of another format refuses it and
// names both versions (gpurun and the wrapper on every node must be the same build).
#pragma once

#include <optional>
#include <string>

#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/plan.h"

namespace gpurun::launcher {

// What a rank's wrapper does besides following the plan.
struct WrapperSettings {
  double kill_grace = 5;  // --kill-grace: seconds from TERM to KILL of a rank's program
};

struct RankTable {
  Scheduler scheduler = Scheduler::local;
  std::optional<std::string> job_id;
  RankPlan plan;  // world_size, ranks, nodes, master_addr/port, cpus_per_rank, stdout_tty
  WrapperSettings wrapper;
};

// The format this build writes and reads; bumped whenever a field's meaning changes.
// 3: "contracts" (--contract), which a format-2 wrapper would ignore, setting no TF_CONFIG.
inline constexpr int kRankTableFormat = 3;
// 4: as 3, but a node whose rows are all [first + i, i, []] (no GPUs) may give "ranks" as their
// count. Written only when format 3 is too long for one argument (131,072 GPU-less ranks on one
// machine: the control-plane benchmark), so a table an older wrapper could read never changes.
inline constexpr int kCompactRankTableFormat = 4;
// 5: as 4, but a run of nodes alike (ranks, GPUs, GPU ids, and rows [first + i, i, [i*k .. i*k +
// k - 1]]) may be one entry {"hosts":"node[0001-1024]", ..., "ranks":8, "gpus_per_rank":1}.
// Written only when format 4 is too long: 1,024 nodes of 8 GPUs were refused (the table was
// 140 kB), where 16,384 such nodes fit in one entry now.
inline constexpr int kGroupedRankTableFormat = 5;

// One line of JSON:
//   {"gpurun_rank_table":3,"gpurun":"0.1.0","scheduler":"slurm","job_id":"777",
//    "master_addr":"node01","master_port":16667,"cpus_per_rank":2,"stdout_tty":false,
//    "kill_grace_ms":5000,"contracts":"torch,tf,jax","world_size":3,
//    "nodes":[{"host":"node01","gpus":2,"gpu_ids":[],"ranks":[[0,0,[0]],[1,1,[1]]]},
//             {"host":"node02","gpus":2,"gpu_ids":[],"ranks":[[2,0,[0]]]}]}
// A node's ranks are rows [rank, local rank, [GPU positions in the node's visible list]].
// Throws Error when the table would not fit in one command-line argument.
std::string encode_rank_table(const RankTable& table);

// The table back, checked whole (every rank once, local ranks 0..k-1 on each node, GPU positions
// below the node's count); throws Error naming what is wrong, or both versions when the text is
// another format's.
RankTable decode_rank_table(const std::string& text);

}  // namespace gpurun::launcher

// Slurm-shaped text output for gpuq: squeue's columns and times, sacct's columns, ExitCode as
// "code:signal", and scontrol-like `show`. Pure functions over the daemon's JSON job documents.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpurun::queue {

std::string squeue_time(int64_t seconds);          // 0:21, 1:43:21, 2-01:43:21
std::string time_limit_text(int64_t seconds);      // UNLIMITED, or squeue_time
std::string sacct_elapsed(int64_t seconds);        // 00:00:21, 2-01:43:21
std::string exit_code_text(int code, int signal);  // "1:0", "0:9"

enum class QueueFormat { kDefault, kLong, kStart };  // kStart: squeue --start's START_TIME

// One line of `gpuq queue`.
struct QueueRow {
  std::string id, name, user, reason, nodelist;
  bool running = false;
  bool completing = false;  // running, being stopped (cancel, requeue): squeue's CG
  int64_t elapsed_s = 0, time_limit_s = 0;
  int gpus_requested = 0;
  std::vector<int> gpus;
  int position = 0;               // pending: its place in the scheduling order (1 = next)
  int64_t expected_start_ms = 0;  // pending: when it should start (0: unknown)
};
std::string local_time(int64_t ms);  // 2026-11-27T14:20:00 in the local zone, as squeue prints
QueueRow queue_row_from_json(const nlohmann::json& job, int64_t now_ms);  // a queue --json entry
// Running rows first, then pending ones, each group in the given order (squeue sorts by state).
// The daemon formats text itself, so listing 10,000 jobs never serializes them to JSON.
std::string format_queue(const std::vector<QueueRow>& rows, QueueFormat f, bool header);
std::string format_history(const nlohmann::json& jobs, bool header);
std::string format_show(const nlohmann::json& job, int64_t now_ms);

}  // namespace gpurun::queue

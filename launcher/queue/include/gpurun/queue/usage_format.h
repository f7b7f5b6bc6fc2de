// usage_format.h: text for gpuq's usage commands, from the daemon's JSON replies: `gpuq stats`
// (seff's layout), its --csv samples, `gpuq report` (sreport's), the gnuplot script behind
// `gpuq stats --plot`, and `--since` times. Pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace gpurun::queue {

// `gpuq stats ID` from a "stats" reply: elapsed, GPU-hours, mean/max utilisation overall and per
// GPU, max GPU memory, CPU efficiency, peak RSS.
std::string format_stats(const nlohmann::json& reply);
// `gpuq stats ARRAY_ID` from a "stats" reply for an array (its "tasks"): one line a task, as
// sacct lists an array: task, state, exit code, elapsed, GPUs, GPU-hours, mean utilisation.
std::string format_array_stats(const nlohmann::json& reply);

// The samples of a "stats" reply as CSV with the header time,gpu,util,mem_used_mib,power_w,temp_c
// (time in UTC, ISO 8601; an empty field where the GPU gave no figure).
std::string samples_csv(const nlohmann::json& samples);

// `gpuq report` from a "report" reply.
std::string format_report(const nlohmann::json& reply);

// A gnuplot script that draws utilisation and memory over time, one line per GPU, each GPU's
// samples in its own samples_csv() file (data_by_gpu), into a PNG at `png_path` (terminal:
// pngcairo, or png).
std::string gnuplot_script(const nlohmann::json& reply,
                           const std::map<int, std::string>& data_by_gpu,
                           const std::string& png_path, const std::string& terminal);

// "7d", "12h", "30m", "2w", "all" (the epoch), "2026-11-01" or "2026-11-01T08:00:00" (local
// time) -> milliseconds since the epoch; throws std::invalid_argument naming the text.
int64_t parse_since(const std::string& text, int64_t now_ms);

// "2026-11-23T10:00:00Z" for a time in milliseconds.
std::string utc_time(int64_t ms);

}  // namespace gpurun::queue

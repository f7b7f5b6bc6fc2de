// info_report.h: `gpurun info` and `--dry-run` output, text and JSON. Private.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/launch.h"
#include "gpurun/launcher/plan.h"

namespace gpurun::launcher {

nlohmann::json info_json(const Allocation& a, const RankPlan& p);
std::string info_text(const Allocation& a, const RankPlan& p);
// The exact command, runnable as printed (with --control none), then every variable each rank
// gets: rank_environment() and start_environment(), `env` being what the ranks inherit and
// `watch` whether --hang-timeout is on (and, under --container, the command that runs its
// program in the image from `workdir`).
std::string dry_run_text(const Allocation& a, const RankPlan& p, const LaunchCommand& c,
                         const std::vector<std::string>& program, const std::string& workdir,
                         const Env& env, bool watch);

}  // namespace gpurun::launcher

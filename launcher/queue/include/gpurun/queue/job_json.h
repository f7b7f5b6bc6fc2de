// JSON form of a gpuq job: the same document is stored in SQLite and sent to clients.
#pragma once

#include <nlohmann/json.hpp>

#include "gpurun/queue/job.h"

namespace gpurun::queue {

// What a reader may see: kFull everything (the store, the job's owner in `show`); kOwner no
// environment, script or arguments (listings); kPublic, for other users, not even the paths (work
// dir, output patterns) nor a reason that names one.
enum class JobView { kFull, kOwner, kPublic };

// A reason fit for other users, the web page and /api/status, which see no path: a failure to
// start names the user's folders ("chdir /home/alice/x: ..."); those become Slurm's
// JobLaunchFailure.
std::string public_reason(const std::string& reason);

nlohmann::json job_to_json(const Job& j, JobView view);
nlohmann::json usage_to_json(const JobUsage& u);
JobUsage usage_from_json(const nlohmann::json& o);  // missing fields read as 0
Job job_from_json(const nlohmann::json& j);  // throws nlohmann::json::exception on bad documents

}  // namespace gpurun::queue

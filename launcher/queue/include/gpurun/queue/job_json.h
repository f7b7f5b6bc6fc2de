// JSON form of a gpuq job: the same document is stored in SQLite and sent to clients.
#pragma once

#include <nlohmann/json.hpp>

#include "gpurun/queue/job.h"

namespace gpurun::queue {

// kPublic drops what other users must not read (environment, script, arguments).
enum class JobView { kFull, kPublic };

nlohmann::json job_to_json(const Job& j, JobView view);
nlohmann::json usage_to_json(const JobUsage& u);
JobUsage usage_from_json(const nlohmann::json& o);  // missing fields read as 0
Job job_from_json(const nlohmann::json& j);  // throws nlohmann::json::exception on bad documents

}  // namespace gpurun::queue

// Fuzz target for the gpuq daemon's request decoder (launcher/queue/src/job/request.cc): any bytes
// must decode or throw std::invalid_argument (the daemon's error reply), never crash, hang, leak
// or throw anything else; and what decodes must hold within the bounds the daemon relies on.
// Coverage-guided with libFuzzer (clang++ -fsanitize=fuzzer,address,undefined; tests/queue's
// CMakeLists builds it so whatever compiler builds the rest), or run by fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "job/request.h"

using namespace gpurun::queue;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Request r;
  try {
    r = decode_request(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const std::invalid_argument&) {
    return 0;
  }
  // A decoded request is within the daemon's bounds.
  if (r.ids.size() > kMaxIdsPerRequest || r.signal < 0 || r.signal > 64) std::abort();
  if (r.submit.umask && *r.submit.umask > 0777) std::abort();
  if (r.max_pending > kMaxIdsPerRequest || r.recent > 1000 || r.spark_points > 1000) std::abort();
  if (r.since_ms < 0 || (r.by != "user" && r.by != "account")) std::abort();
  for (const auto& id : r.ids)
    if (id.id < 0 || (id.task && *id.task < 0)) std::abort();
  // A submission's typed job is within job.h's bounds (the daemon does no parsing of its own).
  const JobRequest& j = r.submit.job;
  if (j.gpus && (*j.gpus < 0 || *j.gpus > kMaxJobGpus)) std::abort();
  if (j.time_limit_s && (*j.time_limit_s < 0 || *j.time_limit_s > kMaxTimeLimitS)) std::abort();
  if (j.array && (j.array->indices.empty() || j.array->indices.size() > kMaxArrayTasks ||
                  j.array->max_running < 0 || j.array->max_running > kMaxArrayCap))
    std::abort();
  if (j.array)
    for (int t : j.array->indices)
      if (t < 0 || t > kMaxArrayIndex) std::abort();
  if (j.dependencies)
    for (const auto& d : *j.dependencies)
      if (d.job_id < 1 || d.job_id > kMaxDependencyId) std::abort();
  if (j.signal && (j.signal->signal < 1 || j.signal->signal > 64 || j.signal->lead_seconds < 0 ||
                   j.signal->lead_seconds > kMaxSignalLeadS))
    std::abort();
  if ((j.priority && (*j.priority < 0 || *j.priority > kMaxPriority)) ||
      (j.cpus_per_task && (*j.cpus_per_task < 1 || *j.cpus_per_task > kMaxCpusPerTask)) ||
      (j.ntasks && (*j.ntasks < 1 || *j.ntasks > kMaxNtasks)))
    std::abort();
  for (const auto* name : {&j.job_name, &j.output, &j.error, &j.chdir, &j.account})
    if (*name && (*name)->empty()) std::abort();
  return 0;
}

extern "C" const char* FuzzAlphabet() {
  return "{}[]\",:0123456789_-.eE\\u opidsgnalubmtscrvhjkyfw\xff";
}

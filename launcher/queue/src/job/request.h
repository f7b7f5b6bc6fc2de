// request.h: the gpuq daemon's request decoder. One request's JSON text becomes a typed Request
// whose every field has been checked (type, range, count) before the daemon acts on it, or a
// std::invalid_argument that names the field and what was expected. Pure: no daemon state, no
// system call, so it is the daemon's only reader of what clients send and the fuzz target's
// subject (tests/queue/fuzz_request.cc).
//
// A submission's #SBATCH lines and command-line options are parsed once, by the client
// (sbatch.h), into a JobRequest that travels typed ("job": {...}, encode_submit); the daemon checks
// it against the bounds in job.h and never reads #SBATCH text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpurun/queue/job.h"

namespace gpurun::queue {

// Bounds on one request (README "Security"): a job list names at most this many jobs, after an
// array id is counted as its tasks; history and the page list at most this many documents.
constexpr size_t kMaxIdsPerRequest = 10000;
constexpr size_t kMaxHistoryJobs = 10000;
// A request's JSON: values (an id, a string, an environment entry...) and nesting.
constexpr size_t kMaxRequestValues = 100000;
constexpr int kMaxRequestDepth = 32;

enum class Op {
  kPing,
  kSubmit,
  kQueue,
  kShow,
  kCancel,
  kHold,
  kRelease,
  kHistory,
  kDrain,
  kResume,
  kStatus,
  kStats,
  kReport,
  kBudget,     // list budgets (one subject's, or all)
  kBudgetSet,  // set or clear one (root or the daemon's owner)
  kRequeue,    // stop running jobs and put them back in the queue, as scontrol requeue
};

// "12" (a job, or a whole array) or "12_3" (task 3 of array 12).
struct JobRef {
  int64_t id = 0;
  std::optional<int64_t> task;
  std::string text;  // as the client wrote it, for messages
};

// The version of a submission's format: 2 sends the parsed JobRequest ("job"); version 1 sent
// the command line's options as text for the daemon to parse, and is refused by name.
constexpr int kSubmitVersion = 2;

struct SubmitRequest {
  std::string script, script_name = "sbatch", cwd, submit_key;
  JobRequest job;  // #SBATCH lines and command line, merged by the client; no warnings
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::optional<uint32_t> umask;  // the submitter's (0-0777)
  std::optional<AttachSpec> attach;  // gpuq run/alloc: the job's stdio comes from the client
};

struct Request {
  Op op = Op::kPing;
  SubmitRequest submit;
  std::vector<JobRef> ids;          // show, cancel, hold, release, requeue, stats; queue, history
                                    // (there: only these, when given)
  std::vector<std::string> states;  // queue: only jobs in these (PENDING, RUNNING, COMPLETING)
  bool brief = false;               // show: the owner too gets no environment or script
  int signal = 0;                   // cancel: 0 cancels, 1-64 only signals
  // queue, history: only these users' jobs ("user": one, "users": up to kMaxUsersPerRequest)
  std::vector<std::string> users;
  bool text = false, long_format = false, header = true;  // queue
  bool start = false;  // queue: START_TIME and POS columns (squeue --start)
  bool all_users = false;                                 // history
  size_t limit = 0;                                       // history: 0 = as many as a reply holds
  size_t max_pending = 500, recent = 20, spark_points = 30;  // status
  size_t max_points = 0;                                     // stats: 0 = every sample
  int64_t since_ms = 0;                                      // report
  std::string by = "user";                                   // report: user or account
  // budget, budget_set: "alice", or "@physics" for an account (budget: empty = all).
  std::string subject;
  std::optional<double> hours;   // budget_set: GPU-hours per period; nullopt ("clear") clears
  std::string period = "total";  // budget_set: week, month or total
};
constexpr double kMaxBudgetHours = 1e9;

constexpr size_t kMaxUsersPerRequest = 64;

// Throws std::invalid_argument ("malformed request: ..." for text that is not JSON).
Request decode_request(std::string_view payload);

// The submit request the client sends (what decode_request reads back as r.submit).
nlohmann::json encode_submit(const SubmitRequest& s);

// "12" or "12_3" -> JobRef; throws std::invalid_argument("invalid job id '...'").
JobRef parse_job_ref(const std::string& text);
// A job id as a user typed it, for a message: bytes other than printable ASCII as '?', at most
// 40 bytes of it.
std::string id_for_message(const std::string& text);

}  // namespace gpurun::queue

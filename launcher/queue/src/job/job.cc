// String conversions for the gpuq job model (job.h).
#include "gpurun/queue/job.h"

#include <fmt/format.h>
#include <strings.h>

#include <regex>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace gpurun::queue {
namespace {
struct StateNames {
  JobState state;
  const char* name;
  const char* code;
};
constexpr StateNames kStates[] = {
    {JobState::kPending, "PENDING", "PD"},     {JobState::kRunning, "RUNNING", "R"},
    {JobState::kCompleted, "COMPLETED", "CD"}, {JobState::kFailed, "FAILED", "F"},
    {JobState::kCancelled, "CANCELLED", "CA"}, {JobState::kTimeout, "TIMEOUT", "TO"},
    {JobState::kNodeFail, "NODE_FAIL", "NF"},
};
}  // namespace

const char* state_name(JobState s) {
  for (const auto& e : kStates)
    if (e.state == s) return e.name;
  return "UNKNOWN";
}

const char* state_code(JobState s) {
  for (const auto& e : kStates)
    if (e.state == s) return e.code;
  return "?";
}

JobState parse_state(const std::string& name) {
  for (const auto& e : kStates)
    if (name == e.name || name == e.code) return e.state;
  throw std::invalid_argument(fmt::format("unknown job state '{}'", name));
}

bool is_final(JobState s) {
  return s != JobState::kPending && s != JobState::kRunning;
}

const char* dep_kind_name(DepKind k) {
  switch (k) {
    case DepKind::kAfterOk:
      return "afterok";
    case DepKind::kAfterNotOk:
      return "afternotok";
    case DepKind::kAfterAny:
      break;
  }
  return "afterany";
}

void JobRequest::merge_from(const JobRequest& o) {
  if (o.job_name) job_name = o.job_name;
  if (o.gpus) gpus = o.gpus;
  if (o.shards) shards = o.shards;
  if (o.gpu_type) gpu_type = o.gpu_type;
  if (o.time_limit_s) time_limit_s = o.time_limit_s;
  if (o.output) output = o.output;
  if (o.error) error = o.error;
  if (o.chdir) chdir = o.chdir;
  if (o.dependencies) dependencies = o.dependencies;
  if (o.array) array = o.array;
  if (o.signal) signal = o.signal;
  if (o.requeue) requeue = o.requeue;
  if (o.open_append) open_append = o.open_append;
  if (o.hold) hold = o.hold;
  if (o.priority) priority = o.priority;
  if (o.account) account = o.account;
  if (o.cpus_per_task) cpus_per_task = o.cpus_per_task;
  if (o.ntasks) ntasks = o.ntasks;
  if (o.gpus_per_task) gpus_per_task = o.gpus_per_task;
  if (o.export_spec) export_spec = o.export_spec;
  if (o.gpus && !o.gpus_per_task) gpus_per_task.reset();  // a later --gres/--gpus wins whole
  if (o.wait) wait = o.wait;
  if (o.mail_events) mail_events = o.mail_events;
  if (o.mail_user) mail_user = o.mail_user;
  warnings.insert(warnings.end(), o.warnings.begin(), o.warnings.end());
}

void JobRequest::resolve_gpus_per_task() {
  if (!gpus_per_task) return;
  const long total = long(*gpus_per_task) * ntasks.value_or(1);
  if (total > kMaxJobGpus)
    throw std::invalid_argument(fmt::format(
        "--gpus-per-task {} with -n {} asks for {} GPUs; at most {} a job", *gpus_per_task,
        ntasks.value_or(1), total, kMaxJobGpus));
  gpus = int(total);
  shards = 0;
  gpus_per_task.reset();
}

void JobRequest::apply_export(std::map<std::string, std::string>& env,
                              const std::string& user) const {
  if (!export_spec) return;
  if (strcasecmp(export_spec->c_str(), "NIL") == 0) {  // no login environment either, as Slurm's
    env.clear();
    return;
  }
  bool all = false;
  std::map<std::string, std::string> named;
  size_t pos = 0;
  while (pos <= export_spec->size()) {
    const size_t comma = std::min(export_spec->find(',', pos), export_spec->size());
    const std::string item = export_spec->substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;  // "ALL," as sbatch takes it
    // Any case, as Slurm compares them (`--export=all` was a list naming a variable "all").
    if (strcasecmp(item.c_str(), "ALL") == 0 || strcasecmp(item.c_str(), "NONE") == 0) {
      all = strcasecmp(item.c_str(), "ALL") == 0;
      continue;
    }
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    if (name.empty() || strcasecmp(item.c_str(), "NIL") == 0)
      throw std::invalid_argument(fmt::format(
          "--export '{}': expected ALL, NONE, NIL alone, or NAME[=VALUE] items separated by "
          "commas",
          *export_spec));
    if (eq != std::string::npos)
      named[name] = item.substr(eq + 1);
    else if (auto it = env.find(name); it != env.end())
      named[name] = it->second;
  }
  if (!all) {
    std::map<std::string, std::string> login;
    for (const char* keep : {"HOME", "USER", "LOGNAME", "SHELL"})
      if (auto it = env.find(keep); it != env.end()) login.insert(*it);
    if (!user.empty()) {  // su and cron may not have set them
      login.insert({"USER", user});
      login.insert({"LOGNAME", user});
    }
    login["PATH"] = "/usr/local/bin:/usr/bin:/bin";
    env.swap(login);
  }
  for (auto& [k, v] : named) env[k] = v;
}

const MailEventName kMailEventNames[8] = {
    {kMailBegin, "BEGIN", 0},
    {kMailEnd, "END", 0},
    {kMailFail, "FAIL", 0},
    {kMailRequeue, "REQUEUE", 0},
    {kMailTimeLimit, "TIME_LIMIT", 100},
    {kMailTimeLimit90, "TIME_LIMIT_90", 90},
    {kMailTimeLimit80, "TIME_LIMIT_80", 80},
    {kMailTimeLimit50, "TIME_LIMIT_50", 50},
};

std::vector<std::string> mail_event_names(unsigned events) {
  std::vector<std::string> out;
  for (const auto& e : kMailEventNames)
    if (events & e.event) out.emplace_back(e.name);
  return out;
}

unsigned mail_event_named(const std::string& name) {
  for (const auto& e : kMailEventNames)
    if (name == e.name) return e.event;
  return 0;
}

bool is_mail_address(const std::string& s) {
  if (s.empty() || s.size() > kMaxMailUserBytes || s[0] == '-' || s[0] == '@' || s.back() == '@')
    return false;
  for (unsigned char c : s)
    if (c <= ' ' || c >= 0x7f || std::strchr(",;:<>()[]\\\"'`", c)) return false;
  return true;
}

ArrayShape array_shape(const std::vector<int>& task_ids) {
  ArrayShape a;
  if (task_ids.empty()) return a;
  std::vector<int> ids = task_ids;
  std::sort(ids.begin(), ids.end());
  a = {ids.front(), ids.back(), static_cast<int>(ids.size()), 1};
  if (ids.size() > 1) a.step = ids[1] - ids[0];
  for (size_t i = 2; i < ids.size(); ++i)
    if (ids[i] - ids[i - 1] != a.step) a.step = 1;
  return a;
}

std::optional<double> util_mean(const JobUsage& u) {
  if (u.util_samples <= 0) return std::nullopt;
  return u.util_sum / static_cast<double>(u.util_samples);
}

double gpu_share(const Job& j) {
  return j.shards > 0 && j.shards_per_gpu > 0 ? static_cast<double>(j.shards) / j.shards_per_gpu
                                              : static_cast<double>(j.gpus.size());
}

double gpu_seconds(const Job& j, int64_t now_ms) {
  if (j.start_ms == 0) return 0;
  int64_t end = j.end_ms ? j.end_ms : now_ms;
  return gpu_share(j) * static_cast<double>(std::max<int64_t>(0, end - j.start_ms)) / 1000.0;
}

double all_runs_gpu_seconds(const Job& j, int64_t now_ms) {
  return j.earlier_gpu_seconds + gpu_seconds(j, now_ms);
}

bool is_mig_profile(const std::string& type) {
  static const std::regex profile(R"(\d+g\.\d+gb(\+me)?)");
  return type.size() <= 32 && std::regex_match(type, profile);
}

std::string display_id(const Job& j) {
  if (j.array_job_id != 0) return fmt::format("{}_{}", j.array_job_id, j.array_task_id);
  return std::to_string(j.id);
}

std::string join_ids(const std::vector<int>& ids) {
  return fmt::format("{}", fmt::join(ids, ","));
}

namespace {
constexpr int kMaxIdsInList = 4096;

bool is_id(const std::string& s) {
  return !s.empty() && s.size() <= 6 && s.find_first_not_of("0123456789") == std::string::npos;
}
}  // namespace

std::vector<int> parse_id_list(const std::string& text) {
  std::vector<int> out;
  if (text.empty()) return out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!is_id(lo) || !is_id(hi) || std::stoi(hi) < std::stoi(lo))
      throw std::invalid_argument(
          fmt::format("bad id '{}' in list '{}': expected ids and ranges, such as 0,1,4-7",
                      item.substr(0, 40), text.substr(0, 80)));
    if (out.size() + (std::stoi(hi) - std::stoi(lo)) >= kMaxIdsInList)
      throw std::invalid_argument(fmt::format("list '{}': more than {} ids",
                                              text.substr(0, 80), kMaxIdsInList));
    for (int id = std::stoi(lo); id <= std::stoi(hi); ++id) out.push_back(id);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

namespace {
bool all_of(const std::string& s, const char* allowed) {
  return s.find_first_not_of(allowed) == std::string::npos;
}
}  // namespace

bool valid_attach_socket(const std::string& name) {
  const std::string prefix = "gpuq-run-";
  return name.size() > prefix.size() && name.size() <= prefix.size() + 80 &&
         name.compare(0, prefix.size(), prefix) == 0 &&
         all_of(name.substr(prefix.size()), "0123456789abcdefghijklmnopqrstuvwxyz-");
}

bool valid_attach_token(const std::string& token) {
  return token.size() == kAttachTokenHex && all_of(token, "0123456789abcdef");
}

}  // namespace gpurun::queue

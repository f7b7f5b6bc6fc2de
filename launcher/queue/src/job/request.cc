// The gpuq request decoder (request.h). Every number is range-checked as the JSON number it is,
// before any cast: 4294967305 must not become signal 9.
#include "job/request.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <iterator>
#include <set>
#include <stdexcept>

#include "job/json_fields.h"

namespace gpurun::queue {
namespace {

using json = nlohmann::json;

using json_fields::field;
using json_fields::get_bool;
using json_fields::get_count;
using json_fields::get_int;
using json_fields::get_object;
using json_fields::get_string;
using json_fields::get_strings;
using json_fields::Obj;
using json_fields::only_keys;

[[noreturn]] void bad_field(const std::string& name, const std::string& expected, const json& got) {
  json_fields::bad_field("request field", name, expected, got);
}

int64_t id_number(const std::string& part, const std::string& text) {
  if (part.empty() || part.size() > 15 || part.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument(fmt::format("invalid job id '{}'", id_for_message(text)));
  return std::stoll(part);
}

std::vector<JobRef> get_ids(const json& o) {
  const json* v = field(o, "ids");
  if (!v || !v->is_array()) bad_field("ids", "a list of job ids", v ? *v : json());
  if (v->size() > kMaxIdsPerRequest)
    throw std::invalid_argument(
        fmt::format("the request names {} jobs: one request may name at most {} jobs; ask for "
                    "fewer at once",
                    v->size(), kMaxIdsPerRequest));
  std::vector<JobRef> out;
  out.reserve(v->size());
  for (const auto& item : *v) {
    if (item.is_number_unsigned() || item.is_number_integer())
      out.push_back(parse_job_ref(item.dump()));
    else if (item.is_string())
      out.push_back(parse_job_ref(item.get<std::string>()));
    else
      throw std::invalid_argument(
          fmt::format("invalid job id {} (expected 12 or 12_3)",
                      item.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 60)));
  }
  return out;
}

Op parse_op(const std::string& op) {
  static const std::map<std::string, Op> ops = {
      {"ping", Op::kPing},       {"submit", Op::kSubmit},        {"queue", Op::kQueue},
      {"show", Op::kShow},       {"cancel", Op::kCancel},        {"hold", Op::kHold},
      {"release", Op::kRelease}, {"history", Op::kHistory},      {"drain", Op::kDrain},
      {"budget", Op::kBudget},   {"budget_set", Op::kBudgetSet}, {"resume", Op::kResume},
      {"status", Op::kStatus},   {"stats", Op::kStats},          {"report", Op::kReport},
      {"requeue", Op::kRequeue}};
  auto it = ops.find(op);
  if (it == ops.end()) {
    std::string shown = json(op).dump(-1, ' ', false, json::error_handler_t::replace);
    throw std::invalid_argument(fmt::format("unknown request op {}", shown.substr(0, 60)));
  }
  return it->second;
}

// A name or path the job gave (-J, -o, -e, -D, -A): absent, or a non-empty string of at most
// `most` bytes (a 1.6 GB -o pattern was accepted, and its expansion took the daemon's memory).
std::optional<std::string> get_name(const Obj& o, const char* key, size_t most = kMaxNameBytes) {
  if (!field(o, key)) return std::nullopt;
  std::string s = get_string(o, key, "");
  if (s.empty() || s.size() > most)
    bad_field(o.name(key), fmt::format("a non-empty string of at most {} bytes", most), json(s));
  return s;
}

std::optional<std::string> get_path(const Obj& o, const char* key) {
  return get_name(o, key, kMaxPathBytes);
}

std::optional<int> get_opt_int(const Obj& o, const char* key, int64_t lo, int64_t hi) {
  if (!field(o, key)) return std::nullopt;
  return static_cast<int>(get_int(o, key, lo, hi, 0));
}

std::optional<bool> get_opt_bool(const Obj& o, const char* key) {
  if (!field(o, key)) return std::nullopt;
  return get_bool(o, key, false);
}

// "user" (one name) and "users" (a list): whose jobs queue and history list.
std::vector<std::string> get_users(const Obj& o) {
  std::vector<std::string> users = get_strings(o, "users");
  if (field(o, "user")) users.push_back(get_string(o, "user", ""));
  if (users.size() > kMaxUsersPerRequest)
    bad_field("users", fmt::format("at most {} user names", kMaxUsersPerRequest), json());
  return users;
}

std::vector<Dependency> get_dependencies(const Obj& o) {
  const std::string name = o.name("dependencies");
  const json& v = *field(o, "dependencies");
  if (!v.is_array() || v.size() > kMaxIdsPerRequest)
    bad_field(name, fmt::format("a list of at most {} dependencies", kMaxIdsPerRequest), v);
  std::vector<Dependency> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", name, i);
    if (!v[i].is_object()) bad_field(at, "an object {\"type\", \"job_id\"}", v[i]);
    const Obj d(v[i], at + ".");
    only_keys(d, {"type", "job_id", "task"});
    Dependency dep;
    const std::string type = get_string(d, "type", "");
    bool known = false;
    for (DepKind k : {DepKind::kAfterOk, DepKind::kAfterAny, DepKind::kAfterNotOk})
      if (type == dep_kind_name(k)) dep.kind = k, known = true;
    if (!known) bad_field(d.name("type"), "afterok, afterany or afternotok", json(type));
    if (!field(d, "job_id")) bad_field(d.name("job_id"), "a job id", json());
    dep.job_id = get_int(d, "job_id", 1, kMaxDependencyId, 0);
    dep.task = static_cast<int>(get_int(d, "task", 0, kMaxArrayIndex, -1));
    out.push_back(dep);
  }
  return out;
}

ArraySpec get_array(const Obj& o) {
  const Obj a(get_object(o, "array", "an object {\"tasks\", \"max_running\"}"), o.name("array."));
  only_keys(a, {"tasks", "max_running"});
  const json* t = field(a, "tasks");
  const std::string want = fmt::format("a list of 1 to {} task ids", kMaxArrayTasks);
  if (!t || !t->is_array() || t->empty() || t->size() > kMaxArrayTasks)
    bad_field(a.name("tasks"), want, t ? *t : json());
  ArraySpec spec;
  std::set<int64_t> seen;
  for (const auto& item : *t) {
    const int64_t id = json_fields::int_value(a, item, a.name("tasks"), 0, kMaxArrayIndex);
    if (!seen.insert(id).second) bad_field(a.name("tasks"), "task ids that differ", item);
    spec.indices.push_back(static_cast<int>(id));
  }
  spec.max_running = static_cast<int>(get_int(a, "max_running", 0, kMaxArrayCap, 0));
  return spec;
}

SignalSpec get_signal(const Obj& o) {
  const Obj s(get_object(o, "signal", "an object {\"number\", \"lead_seconds\", \"batch_only\"}"),
              o.name("signal."));
  only_keys(s, {"number", "lead_seconds", "batch_only"});
  SignalSpec spec;
  if (!field(s, "number")) bad_field(s.name("number"), "a signal number from 1 to 64", json());
  spec.signal = static_cast<int>(get_int(s, "number", 1, 64, 0));
  spec.lead_seconds = static_cast<int>(get_int(s, "lead_seconds", 0, kMaxSignalLeadS, 60));
  spec.batch_only = get_bool(s, "batch_only", false);
  return spec;
}

// "mail_type": names of kMailEventNames, each at most once; "mail_user": an address.
void get_mail(const Obj& o, JobRequest& r) {
  if (const json* v = field(o, "mail_type")) {
    const std::string expected = "a list of BEGIN, END, FAIL, REQUEUE, TIME_LIMIT[_90|_80|_50]";
    if (!v->is_array() || v->size() > std::size(kMailEventNames))
      bad_field(o.name("mail_type"), expected, *v);
    unsigned events = 0;
    for (const json& name : *v) {
      const unsigned bit = name.is_string() ? mail_event_named(name.get<std::string>()) : 0;
      if (!bit || (events & bit)) bad_field(o.name("mail_type"), expected + ", each once", *v);
      events |= bit;
    }
    r.mail_events = events;
  }
  r.mail_user = get_name(o, "mail_user");
  if (r.mail_user && !is_mail_address(*r.mail_user))
    bad_field(o.name("mail_user"), "one address, user or user@host", json(*r.mail_user));
}

// "job": what the client parsed from #SBATCH lines and its command line (sbatch.h), each field
// checked against the bounds in job.h; absent fields stay unset, as the parser leaves them.
JobRequest get_job(const json& top) {
  const Obj o(get_object(top, "job", "an object: the job's options as gpuq submit parsed them"),
              "job.");
  only_keys(o, {"name", "gpus", "shards", "gpu_type", "time_limit_s", "output", "error", "chdir", "dependencies", "array",
                "signal", "requeue", "hold", "priority", "account", "cpus_per_task", "ntasks",
                "mail_type", "mail_user", "open_append"});
  JobRequest r;
  r.job_name = get_name(o, "name");
  r.gpus = get_opt_int(o, "gpus", 0, kMaxJobGpus);
  r.shards = get_opt_int(o, "shards", 0, kMaxShardsPerGpu);
  r.gpu_type = get_name(o, "gpu_type");
  if (r.gpu_type && (r.gpu_type->size() > 64 || r.gpu_type->find_first_of(":,\n") != std::string::npos))
    bad_field(o.name("gpu_type"), "a GPU type (at most 64 bytes, no ':' or ',')", json(*r.gpu_type));
  if (field(o, "time_limit_s")) r.time_limit_s = get_int(o, "time_limit_s", 0, kMaxTimeLimitS, 0);
  r.output = get_path(o, "output");
  r.error = get_path(o, "error");
  r.chdir = get_path(o, "chdir");
  if (field(o, "dependencies")) r.dependencies = get_dependencies(o);
  if (field(o, "array")) r.array = get_array(o);
  if (field(o, "signal")) r.signal = get_signal(o);
  r.requeue = get_opt_bool(o, "requeue");
  r.open_append = get_opt_bool(o, "open_append");
  r.hold = get_opt_bool(o, "hold");
  r.priority = get_opt_int(o, "priority", 0, kMaxPriority);
  r.account = get_name(o, "account");
  r.cpus_per_task = get_opt_int(o, "cpus_per_task", 1, kMaxCpusPerTask);
  r.ntasks = get_opt_int(o, "ntasks", 1, kMaxNtasks);
  get_mail(o, r);
  return r;
}

// "attach": gpuq run's socket {"socket", "token", "pty"} (job.h's AttachSpec), checked whole.
AttachSpec get_attach(const json& top) {
  const Obj a(get_object(top, "attach", "an object {\"socket\", \"token\", \"pty\"}"),
              "attach.");
  only_keys(a, {"socket", "token", "pty"});
  AttachSpec spec;
  spec.socket = get_string(a, "socket", "");
  if (!valid_attach_socket(spec.socket))
    bad_field(a.name("socket"), "gpuq-run- then 1 to 80 of [0-9a-z-]", json(spec.socket));
  spec.token = get_string(a, "token", "");
  if (!valid_attach_token(spec.token))
    bad_field(a.name("token"), fmt::format("{} lowercase hex digits", kAttachTokenHex),
              json(spec.token));
  spec.pty = get_bool(a, "pty", false);
  return spec;
}

SubmitRequest decode_submit(const json& o) {
  // Version 1 sent the command line's options as text, for the daemon to parse with the script's
  // #SBATCH lines; the daemon parses neither now.
  if (field(o, "options") || !field(o, "version"))
    throw std::invalid_argument(fmt::format(
        "submit request of version 1 (options as text): this gpuq daemon reads version {}, in "
        "which gpuq submit parses #SBATCH lines and options itself; submit with the gpuq of the "
        "daemon's version",
        kSubmitVersion));
  get_int(o, "version", kSubmitVersion, kSubmitVersion, 0);
  SubmitRequest s;
  if (!field(o, "script")) bad_field("script", "the batch script's text", json());
  s.script = json_fields::get_bytes(o, "script", "");
  s.script_name = get_string(o, "script_name", s.script_name);
  s.cwd = get_string(o, "cwd", "");
  if (s.script_name.size() > kMaxPathBytes || s.cwd.size() > kMaxPathBytes)
    bad_field(s.cwd.size() > kMaxPathBytes ? "cwd" : "script_name",
              fmt::format("at most {} bytes", kMaxPathBytes), json());
  s.submit_key = get_string(o, "submit_key", "");
  s.job = get_job(o);
  s.args = json_fields::get_bytes_list(o, "args");
  s.env = json_fields::get_bytes_map(o, "env");
  if (field(o, "umask")) s.umask = static_cast<uint32_t>(get_int(o, "umask", 0, 0777, 022));
  if (field(o, "attach")) {
    s.attach = get_attach(o);
    if (s.job.array)
      bad_field("attach", "no attach for an array (gpuq run starts one job)", o["attach"]);
  }
  return s;
}

// "subject": a user name or "@account" (1 to 64 printable bytes, no spaces); budget_set's
// "hours": 0 to kMaxBudgetHours (or "clear": true), "period": week, month or total.
void decode_budget(const json& o, Request& r) {
  r.subject = get_string(o, "subject", "");
  const bool printable = std::all_of(r.subject.begin(), r.subject.end(),
                                     [](unsigned char c) { return c > ' ' && c < 0x7f; });
  if (r.subject.size() > 64 || !printable || r.subject == "@" ||
      (r.op == Op::kBudgetSet && r.subject.empty()))
    bad_field("subject", "a user name or @account (at most 64 printable bytes)", json(r.subject));
  if (r.op != Op::kBudgetSet) return;
  if (get_bool(o, "clear", false)) return;
  const json* h = field(o, "hours");
  if (!h || !h->is_number() || !(h->get<double>() >= 0) || h->get<double>() > kMaxBudgetHours)
    bad_field("hours", fmt::format("0 to {:g} GPU-hours", kMaxBudgetHours), h ? *h : json());
  r.hours = h->get<double>();
  r.period = get_string(o, "period", "total");
  if (r.period != "week" && r.period != "month" && r.period != "total")
    bad_field("period", "week, month or total", json(r.period));
}

void decode_fields(const json& o, Request& r) {
  switch (r.op) {
    case Op::kSubmit:
      r.submit = decode_submit(o);
      break;
    case Op::kShow:
    case Op::kHold:
    case Op::kRelease:
    case Op::kRequeue:
    case Op::kStats:
      r.ids = get_ids(o);
      r.brief = get_bool(o, "brief", false);
      r.max_points = get_count(o, "max_points", 1000000, 0);
      break;
    case Op::kCancel:
      r.ids = get_ids(o);
      r.signal = static_cast<int>(get_int(o, "signal", 0, 64, 0));
      break;
    case Op::kQueue:
      r.users = get_users(o);
      if (field(o, "ids")) r.ids = get_ids(o);
      r.states = get_strings(o, "states");
      if (r.states.size() > 3) bad_field("states", "at most the 3 states", json(r.states.size()));
      for (const std::string& st : r.states)
        if (st != "PENDING" && st != "RUNNING" && st != "COMPLETING")
          bad_field("states", "PENDING, RUNNING or COMPLETING", json(st));
      r.text = get_bool(o, "text", false);
      r.long_format = get_bool(o, "long", false);
      r.start = get_bool(o, "start", false);
      r.header = get_bool(o, "header", true);
      break;
    case Op::kHistory:
      r.users = get_users(o);
      if (field(o, "ids")) r.ids = get_ids(o);
      r.all_users = get_bool(o, "all_users", false);
      r.limit = get_count(o, "limit", size_t{1} << 53, 0);
      break;
    case Op::kStatus:
      r.max_pending = get_count(o, "max_pending", kMaxIdsPerRequest, 500);
      r.recent = get_count(o, "recent", 1000, 20);
      r.spark_points = get_count(o, "spark_points", 1000, 30);
      break;
    case Op::kReport:
      r.since_ms = get_int(o, "since_ms", 0, INT64_MAX, 0);
      r.by = get_string(o, "by", "user");
      if (r.by != "user" && r.by != "account") bad_field("by", "user or account", json(r.by));
      break;
    case Op::kBudget:
    case Op::kBudgetSet:
      decode_budget(o, r);
      break;
    case Op::kPing:
    case Op::kDrain:
    case Op::kResume:
      break;
  }
}

json encode_job(const JobRequest& r) {
  json j = json::object();
  if (r.job_name) j["name"] = *r.job_name;
  if (r.gpus) j["gpus"] = *r.gpus;
  if (r.shards) j["shards"] = *r.shards;
  if (r.gpu_type && !r.gpu_type->empty()) j["gpu_type"] = *r.gpu_type;
  if (r.time_limit_s) j["time_limit_s"] = *r.time_limit_s;
  if (r.output) j["output"] = *r.output;
  if (r.error) j["error"] = *r.error;
  if (r.chdir) j["chdir"] = *r.chdir;
  if (r.dependencies) {
    j["dependencies"] = json::array();
    for (const auto& d : *r.dependencies) {
      j["dependencies"].push_back({{"type", dep_kind_name(d.kind)}, {"job_id", d.job_id}});
      if (d.task >= 0) j["dependencies"].back()["task"] = d.task;
    }
  }
  if (r.array) j["array"] = {{"tasks", r.array->indices}, {"max_running", r.array->max_running}};
  if (r.signal)
    j["signal"] = {{"number", r.signal->signal},
                   {"lead_seconds", r.signal->lead_seconds},
                   {"batch_only", r.signal->batch_only}};
  if (r.requeue) j["requeue"] = *r.requeue;
  if (r.open_append) j["open_append"] = *r.open_append;
  if (r.hold) j["hold"] = *r.hold;
  if (r.priority) j["priority"] = *r.priority;
  if (r.account) j["account"] = *r.account;
  if (r.cpus_per_task) j["cpus_per_task"] = *r.cpus_per_task;
  if (r.ntasks) j["ntasks"] = *r.ntasks;
  if (r.mail_events) j["mail_type"] = mail_event_names(*r.mail_events);
  if (r.mail_user) j["mail_user"] = *r.mail_user;
  return j;
}

}  // namespace

json encode_submit(const SubmitRequest& s) {
  json req = {{"op", "submit"},
              {"version", kSubmitVersion},
              {"script", json_fields::bytes_json(s.script)},
              {"script_name", s.script_name},
              {"cwd", s.cwd},
              {"submit_key", s.submit_key},
              {"job", encode_job(s.job)},
              {"args", json_fields::bytes_json(s.args)},
              {"env", json_fields::bytes_json(s.env)}};
  if (s.umask) req["umask"] = *s.umask;
  if (s.attach)
    req["attach"] = {
        {"socket", s.attach->socket}, {"token", s.attach->token}, {"pty", s.attach->pty}};
  return req;
}

std::string id_for_message(const std::string& text) {
  std::string out = text.substr(0, 40);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return out + (text.size() > 40 ? "..." : "");
}

JobRef parse_job_ref(const std::string& text) {
  JobRef r;
  r.text = text;
  const auto us = text.find('_');
  r.id = id_number(text.substr(0, us), text);
  if (us != std::string::npos) r.task = id_number(text.substr(us + 1), text);
  return r;
}

Request decode_request(std::string_view payload) {
  json o;
  // Counted while parsing, so a request of millions of tiny values is refused before it is a
  // tree of hundreds of MB (8 MiB of "1," is 4 million values).
  size_t values = 0;
  auto bound = [&values](int depth, json::parse_event_t, json&) {
    if (depth > kMaxRequestDepth)
      throw std::invalid_argument(
          fmt::format("the request is nested deeper than {} levels", kMaxRequestDepth));
    if (++values > kMaxRequestValues)
      throw std::invalid_argument(fmt::format(
          "the request holds more than {} JSON values: one request may name at most {} jobs, "
          "and a script with its environment needs far fewer values",
          kMaxRequestValues, kMaxIdsPerRequest));
    return true;
  };
  try {
    o = json::parse(payload.begin(), payload.end(), bound);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw std::invalid_argument(fmt::format("malformed request: {}", e.what()));
  }
  if (!o.is_object()) throw std::invalid_argument("request is not a JSON object");
  const json* op = field(o, "op");
  if (!op || !op->is_string()) bad_field("op", "the name of a request", op ? *op : json());
  Request r;
  r.op = parse_op(op->get<std::string>());
  decode_fields(o, r);
  return r;
}

}  // namespace gpurun::queue

// The gpuq request decoder (request.h). Every number is range-checked as the JSON number it is,
// before any cast: 4294967305 must not become signal 9.
#include "job/request.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace gpurun::queue {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad_field(const char* key, const std::string& expected, const json& got) {
  std::string shown = got.dump(-1, ' ', false, json::error_handler_t::replace);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  throw std::invalid_argument(
      fmt::format("request field '{}': expected {}, got {}", key, expected, shown));
}

const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

// An integer in [lo, hi], compared as the JSON number it is (signed or unsigned), never cast first.
int64_t get_int(const json& o, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  const json* v = field(o, key);
  if (!v) return fallback;
  const std::string want = fmt::format("an integer from {} to {}", lo, hi);
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      bad_field(key, want, *v);
    return static_cast<int64_t>(u);
  }
  if (!v->is_number_integer()) bad_field(key, want, *v);
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) bad_field(key, want, *v);
  return i;
}

size_t get_count(const json& o, const char* key, size_t hi, size_t fallback) {
  return static_cast<size_t>(
      get_int(o, key, 0, static_cast<int64_t>(hi), static_cast<int64_t>(fallback)));
}

bool get_bool(const json& o, const char* key, bool fallback) {
  const json* v = field(o, key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad_field(key, "true or false", *v);
  return v->get<bool>();
}

std::string get_string(const json& o, const char* key, const std::string& fallback) {
  const json* v = field(o, key);
  if (!v) return fallback;
  if (!v->is_string()) bad_field(key, "a string", *v);
  return v->get<std::string>();
}

std::vector<std::string> get_strings(const json& o, const char* key) {
  std::vector<std::string> out;
  const json* v = field(o, key);
  if (!v) return out;
  if (!v->is_array()) bad_field(key, "a list of strings", *v);
  for (const auto& s : *v) {
    if (!s.is_string()) bad_field(key, "a list of strings", s);
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::map<std::string, std::string> get_env(const json& o) {
  std::map<std::string, std::string> out;
  const json* v = field(o, "env");
  if (!v) return out;
  if (!v->is_object()) bad_field("env", "an object of strings", *v);
  for (const auto& [k, s] : v->items()) {
    if (!s.is_string()) bad_field("env", fmt::format("a string for {}", k), s);
    out[k] = s.get<std::string>();
  }
  return out;
}

int64_t id_number(const std::string& part, const std::string& text) {
  if (part.empty() || part.size() > 15 || part.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument(fmt::format("invalid job id '{}'", text));
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
      {"ping", Op::kPing},       {"submit", Op::kSubmit},   {"queue", Op::kQueue},
      {"show", Op::kShow},       {"cancel", Op::kCancel},   {"hold", Op::kHold},
      {"release", Op::kRelease}, {"history", Op::kHistory}, {"drain", Op::kDrain},
      {"resume", Op::kResume},   {"status", Op::kStatus},   {"stats", Op::kStats},
      {"report", Op::kReport}};
  auto it = ops.find(op);
  if (it == ops.end()) {
    std::string shown = json(op).dump(-1, ' ', false, json::error_handler_t::replace);
    throw std::invalid_argument(fmt::format("unknown request op {}", shown.substr(0, 60)));
  }
  return it->second;
}

SubmitRequest decode_submit(const json& o) {
  SubmitRequest s;
  if (!field(o, "script")) bad_field("script", "the batch script's text", json());
  s.script = get_string(o, "script", "");
  s.script_name = get_string(o, "script_name", s.script_name);
  s.cwd = get_string(o, "cwd", "");
  s.submit_key = get_string(o, "submit_key", "");
  s.options = get_strings(o, "options");
  s.args = get_strings(o, "args");
  s.env = get_env(o);
  if (field(o, "umask")) s.umask = static_cast<uint32_t>(get_int(o, "umask", 0, 0777, 022));
  return s;
}

void decode_fields(const json& o, Request& r) {
  switch (r.op) {
    case Op::kSubmit:
      r.submit = decode_submit(o);
      break;
    case Op::kShow:
    case Op::kHold:
    case Op::kRelease:
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
      if (field(o, "user")) r.user = get_string(o, "user", "");
      r.text = get_bool(o, "text", false);
      r.long_format = get_bool(o, "long", false);
      r.header = get_bool(o, "header", true);
      break;
    case Op::kHistory:
      if (field(o, "user")) r.user = get_string(o, "user", "");
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
    case Op::kPing:
    case Op::kDrain:
    case Op::kResume:
      break;
  }
}

}  // namespace

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

// The supervisor spec file (supervisor_spec.h).
#include "supervise/supervisor_spec.h"

#include <fmt/format.h>

#include <stdexcept>

#include "gpurun/common/atomic_file.h"
#include "gpurun/common/posix.h"
#include "job/json_fields.h"

namespace gpurun::queue {

using json = nlohmann::json;

json spec_to_json(const SupervisorSpec& s) {
  json o = {{"version", SupervisorSpec::kVersion},
            {"job_id", s.job_id},
            {"uid", s.uid},
            {"gid", s.gid},
            {"user", s.user},
            {"host", s.host},
            {"umask", s.umask},
            {"cwd", s.cwd},
            {"script_path", s.script_path},
            {"script", json_fields::bytes_json(s.script)},
            {"args", json_fields::bytes_json(s.args)},
            {"env", json_fields::bytes_json(s.env)},
            {"output", s.output},
            {"error", s.error},
            {"append_output", s.append_output},
            {"start_ms", s.start_ms},
            {"time_limit_s", s.time_limit_s},
            {"signal", s.signal.signal},
            {"lead_seconds", s.signal.lead_seconds},
            {"batch_only", s.signal.batch_only},
            {"kill_wait_s", s.kill_wait_s},
            {"drop_privileges", s.drop_privileges}};
  if (!s.attach.socket.empty())
    o["attach"] = {
        {"socket", s.attach.socket}, {"token", s.attach.token}, {"pty", s.attach.pty}};
  return o;
}

namespace {

using json_fields::Obj;

// A field every spec has: its absence is an error, never a default.
int64_t need_int(const Obj& o, const char* key, int64_t lo, int64_t hi) {
  return json_fields::int_value(o, json_fields::required(o, key, "a number"), o.name(key), lo, hi);
}

std::string need_string(const Obj& o, const char* key) {
  json_fields::required(o, key, "a string");
  return json_fields::get_string(o, key, "");
}

bool need_bool(const Obj& o, const char* key) {
  json_fields::required(o, key, "true or false");
  return json_fields::get_bool(o, key, false);
}

}  // namespace

SupervisorSpec spec_from_json(const json& j, const std::string& file) {
  const std::string where = fmt::format("job spec {}: field", file);
  if (!j.is_object())
    throw std::invalid_argument(fmt::format("job spec {}: not a JSON object", file));
  const Obj o(j, "", where);
  json_fields::get_int(o, "version", SupervisorSpec::kVersion, SupervisorSpec::kVersion,
                       SupervisorSpec::kVersion);
  constexpr int64_t kMaxId = 4294967295;
  SupervisorSpec s;
  s.job_id = need_int(o, "job_id", 1, INT64_MAX);
  s.uid = static_cast<uint32_t>(need_int(o, "uid", 0, kMaxId));
  s.gid = static_cast<uint32_t>(need_int(o, "gid", 0, kMaxId));
  s.user = need_string(o, "user");
  s.host = json_fields::get_string(o, "host", common::hostname());
  s.umask = static_cast<uint32_t>(json_fields::get_int(o, "umask", 0, 0777, 022));
  s.cwd = need_string(o, "cwd");
  s.script_path = need_string(o, "script_path");
  json_fields::required(o, "script", "a string");
  s.script = json_fields::get_bytes(o, "script", "");
  json_fields::required(o, "args", "a list of strings");
  s.args = json_fields::get_bytes_list(o, "args");
  json_fields::required(o, "env", "an object of strings");
  s.env = json_fields::get_bytes_map(o, "env");
  s.output = need_string(o, "output");
  s.error = need_string(o, "error");
  s.append_output = need_bool(o, "append_output");
  s.start_ms = need_int(o, "start_ms", 0, INT64_MAX);
  s.time_limit_s = need_int(o, "time_limit_s", 0, kMaxTimeLimitS);
  s.signal.signal = static_cast<int>(need_int(o, "signal", 0, 64));
  s.signal.lead_seconds = static_cast<int>(need_int(o, "lead_seconds", 0, kMaxSignalLeadS));
  s.signal.batch_only = need_bool(o, "batch_only");
  s.kill_wait_s = static_cast<int>(need_int(o, "kill_wait_s", 0, INT32_MAX));
  s.drop_privileges = need_bool(o, "drop_privileges");
  if (json_fields::field(o, "attach")) {
    const Obj a(json_fields::get_object(o, "attach", "an object"), o.name("attach."), where);
    s.attach = {need_string(a, "socket"), need_string(a, "token"), need_bool(a, "pty")};
    if (!valid_attach_socket(s.attach.socket) || !valid_attach_token(s.attach.token))
      throw std::invalid_argument(fmt::format("{} 'attach': a bad socket name or token", where));
  }
  return s;
}

void write_spec(const std::string& path, const SupervisorSpec& s) {
  common::write_file_atomic(path,
                            spec_to_json(s).dump(-1, ' ', false, json::error_handler_t::replace),
                            0600, common::Durability::kNoSync);
}

SupervisorSpec read_spec(const std::string& path) {
  auto text = common::read_file(path);
  if (!text) throw std::invalid_argument(fmt::format("job spec {} is missing", path));
  json o;
  try {
    o = json::parse(*text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(fmt::format("job spec {} is not JSON: {}", path, e.what()));
  }
  return spec_from_json(o, path);
}

}  // namespace gpurun::queue

// Job <-> JSON (job_json.h).
#include "gpurun/queue/job_json.h"

#include "job/json_fields.h"

namespace gpurun::queue {

nlohmann::json usage_to_json(const JobUsage& u) {
  return {{"util_samples", u.util_samples},
          {"util_sum", u.util_sum},
          {"util_max", u.util_max},
          {"mem_max_mib", u.mem_max_mib},
          {"cpu_seconds", u.cpu_seconds},
          {"peak_rss_bytes", u.peak_rss_bytes},
          {"last_sample_ms", u.last_sample_ms}};
}

JobUsage usage_from_json(const nlohmann::json& o) {
  JobUsage u;
  u.util_samples = o.value("util_samples", int64_t{0});
  u.util_sum = o.value("util_sum", 0.0);
  u.util_max = o.value("util_max", 0.0);
  u.mem_max_mib = o.value("mem_max_mib", 0.0);
  u.cpu_seconds = o.value("cpu_seconds", 0.0);
  u.peak_rss_bytes = o.value("peak_rss_bytes", int64_t{0});
  u.last_sample_ms = o.value("last_sample_ms", int64_t{0});
  return u;
}

std::string public_reason(const std::string& reason) {
  return reason.find('/') == std::string::npos ? reason : "JobLaunchFailure";
}

namespace {
nlohmann::json array_to_json(const ArrayShape& a) {
  return {{"min", a.min}, {"max", a.max}, {"count", a.count}, {"step", a.step}};
}
}  // namespace

nlohmann::json job_to_json(const Job& j, JobView view) {
  nlohmann::json deps = nlohmann::json::array();
  for (const auto& d : j.dependencies) {
    deps.push_back({{"type", dep_kind_name(d.kind)}, {"job_id", d.job_id}});
    if (d.task >= 0) deps.back()["task"] = d.task;
  }
  nlohmann::json o = {
      {"job_id", j.id},
      {"display_id", display_id(j)},
      {"array_job_id", j.array_job_id},
      {"array_task_id", j.array_task_id},
      {"array_max_running", j.array_max_running},
      {"uid", j.uid},
      {"gid", j.gid},
      {"user", j.user},
      {"name", j.name},
      {"account", j.account},
      {"cpus", j.cpus},
      {"state", state_name(j.state)},
      {"reason", view == JobView::kPublic ? public_reason(j.reason) : j.reason},
      {"priority", j.priority},
      {"gpus_requested", j.gpus_requested},
      {"shards", j.shards},
      {"shards_per_gpu", j.shards_per_gpu},
      {"mig_profile", j.mig_profile},
      {"time_limit_s", j.time_limit_s},
      {"held", j.held},
      {"requeue", j.requeue},
      {"no_requeue", j.no_requeue},
      {"open_append", j.open_append},
      {"cancel_requested", j.cancel_requested},
      {"requeue_requested", j.requeue_requested},
      {"restart_count", j.restart_count},
      {"earlier_gpu_seconds", j.earlier_gpu_seconds},
      {"submit_ms", j.submit_ms},
      {"start_ms", j.start_ms},
      {"end_ms", j.end_ms},
      {"gpus", j.gpus},
      {"exit_code", j.exit_code},
      {"exit_signal", j.exit_signal},
      {"dependencies", deps},
      {"signal",
       {{"signal", j.signal.signal},
        {"lead_seconds", j.signal.lead_seconds},
        {"batch_only", j.signal.batch_only}}},
      {"ntasks", j.ntasks},
      {"boot_id", j.boot_id},
      {"usage", usage_to_json(j.usage)},
      {"interactive", !j.attach.socket.empty()},
  };
  if (j.array_job_id) o["array"] = array_to_json(j.array);
  if (view != JobView::kPublic) {
    o["cwd"] = j.cwd;
    o["output"] = j.output_pattern;
    o["error"] = j.error_pattern;
    o["umask"] = j.umask;
    o["mail_type"] = mail_event_names(j.mail.events);
    o["mail_user"] = j.mail.user;
    o["mail_sent"] = j.mail_sent;
  }
  if (view == JobView::kFull) {
    o["script"] = json_fields::bytes_json(j.script);
    o["args"] = json_fields::bytes_json(j.args);
    o["env"] = json_fields::bytes_json(j.env);
    o["submit_key"] = j.submit_key;
    if (!j.attach.socket.empty())
      o["attach"] = {{"socket", j.attach.socket}, {"token", j.attach.token}, {"pty", j.attach.pty}};
  }
  return o;
}

Job job_from_json(const nlohmann::json& o) {
  Job j;
  j.id = o.at("job_id").get<int64_t>();
  j.array_job_id = o.value("array_job_id", int64_t{0});
  j.array_task_id = o.value("array_task_id", -1);
  j.array_max_running = o.value("array_max_running", 0);
  j.uid = o.at("uid").get<uint32_t>();
  j.gid = o.value("gid", uint32_t{0});
  j.user = o.value("user", "");
  j.name = o.value("name", "");
  j.state = parse_state(o.at("state").get<std::string>());
  j.reason = o.value("reason", "");
  j.priority = o.value("priority", 0);
  j.gpus_requested = o.value("gpus_requested", 1);
  j.shards = o.value("shards", 0);
  j.shards_per_gpu = o.value("shards_per_gpu", 0);
  j.mig_profile = o.value("mig_profile", "");
  j.time_limit_s = o.value("time_limit_s", int64_t{0});
  j.held = o.value("held", false);
  j.requeue = o.value("requeue", false);
  j.no_requeue = o.value("no_requeue", false);
  j.open_append = o.value("open_append", false);
  j.cancel_requested = o.value("cancel_requested", false);
  j.requeue_requested = o.value("requeue_requested", false);
  j.restart_count = o.value("restart_count", 0);
  j.earlier_gpu_seconds = o.value("earlier_gpu_seconds", 0.0);
  j.submit_ms = o.value("submit_ms", int64_t{0});
  j.start_ms = o.value("start_ms", int64_t{0});
  j.end_ms = o.value("end_ms", int64_t{0});
  j.gpus = o.value("gpus", std::vector<int>{});
  j.exit_code = o.value("exit_code", 0);
  j.exit_signal = o.value("exit_signal", 0);
  for (const auto& d : o.value("dependencies", nlohmann::json::array())) {
    std::string t = d.at("type").get<std::string>();
    DepKind k = t == "afterok"      ? DepKind::kAfterOk
                : t == "afternotok" ? DepKind::kAfterNotOk
                                    : DepKind::kAfterAny;
    j.dependencies.push_back({k, d.at("job_id").get<int64_t>(), d.value("task", -1)});
  }
  if (o.contains("signal")) {
    const auto& s = o["signal"];
    j.signal.signal = s.value("signal", 0);
    j.signal.lead_seconds = s.value("lead_seconds", 60);
    j.signal.batch_only = s.value("batch_only", false);
  }
  j.cwd = o.value("cwd", "");
  j.output_pattern = o.value("output", "");
  j.error_pattern = o.value("error", "");
  const json_fields::Obj record(o, "", "job record field");
  j.script = json_fields::get_bytes(record, "script", "");
  j.args = json_fields::get_bytes_list(record, "args");
  j.env = json_fields::get_bytes_map(record, "env");
  j.submit_key = o.value("submit_key", "");
  j.boot_id = o.value("boot_id", "");
  j.account = o.value("account", "");
  j.cpus = o.value("cpus", 1);
  j.ntasks = o.value("ntasks", 1);
  j.umask = o.value("umask", 022u);
  for (const auto& name : o.value("mail_type", std::vector<std::string>{}))
    j.mail.events |= mail_event_named(name);
  j.mail.user = o.value("mail_user", "");
  j.mail_sent = o.value("mail_sent", 0u);
  if (o.contains("array")) {
    const auto& a = o["array"];
    j.array = {a.value("min", 0), a.value("max", 0), a.value("count", 0), a.value("step", 1)};
  }
  if (o.contains("attach")) {
    const auto& a = o["attach"];
    j.attach = {a.value("socket", ""), a.value("token", ""), a.value("pty", false)};
  }
  if (o.contains("usage")) j.usage = usage_from_json(o["usage"]);
  return j;
}

}  // namespace gpurun::queue

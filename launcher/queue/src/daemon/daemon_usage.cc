// gpuq daemon: usage sampling and the requests that read it. The sampling thread (usage_sampler.h)
// hands over ticks; each becomes raw samples of the GPUs that running jobs hold (kept for
// --sample-retention) and updates of those jobs' lasting figures (JobUsage), all in the loop's
// batch transaction. `status` feeds `gpuq web` (the page, /api/status, /metrics), `stats` feeds
// `gpuq stats` and the job page, `report` feeds `gpuq report`.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>

#include "daemon/daemon.h"
#include "gpurun/queue/job_json.h"
#include "supervise/runfiles.h"
#include "daemon/store.h"

namespace gpurun::queue {
namespace {

constexpr size_t kMaxSamplesPerReply = 200000;
constexpr size_t kMaxTasksListed = 1000;  // of an array, in a "stats" reply

nlohmann::json figure(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

// What the page, /api/status and `gpuq stats` show of a job: no environment, script or paths.
nlohmann::json job_brief(const Job& j, int64_t now) {
  int64_t end = j.end_ms ? j.end_ms : now;
  return {{"job_id", j.id},
          {"display_id", display_id(j)},
          {"name", j.name},
          {"user", j.user},
          {"account", j.account},
          {"state", state_name(j.state)},
          {"reason", public_reason(j.reason)},
          {"gpus", j.gpus},
          {"gpus_requested", j.gpus_requested},
          {"shards", j.shards},
          {"shards_per_gpu", j.shards_per_gpu},
          {"cpus", j.cpus},
          {"priority", j.priority},
          {"submit_ms", j.submit_ms},
          {"start_ms", j.start_ms},
          {"end_ms", j.end_ms},
          {"elapsed_s", j.start_ms ? std::max<int64_t>(0, end - j.start_ms) / 1000 : 0},
          {"time_limit_s", j.time_limit_s},
          {"exit_code", j.exit_code},
          {"exit_signal", j.exit_signal},
          {"gpu_hours", all_runs_gpu_seconds(j, now) / 3600.0},
          {"util_mean", figure(util_mean(j.usage))},
          {"usage", usage_to_json(j.usage)}};
}

namespace {

nlohmann::json sample_json(const Store::Sample& s) {
  return nlohmann::json::array({s.time_ms, s.gpu, figure(s.util), figure(s.mem_used_mib),
                                figure(s.mem_total_mib), figure(s.power_w), figure(s.temp_c)});
}

// At most max_points samples per GPU: consecutive samples are averaged in equal buckets, so a
// week-long job's plot stays a few hundred points.
std::vector<Store::Sample> downsample(const std::vector<Store::Sample>& in, size_t max_points) {
  std::map<int, std::vector<const Store::Sample*>> by_gpu;
  for (const auto& s : in) by_gpu[s.gpu].push_back(&s);
  std::vector<Store::Sample> out;
  for (const auto& [gpu, v] : by_gpu) {
    // ceil(size / max_points), at least 1; written so that no sum can wrap.
    size_t per = max_points && v.size() > max_points ? (v.size() - 1) / max_points + 1 : 1;
    for (size_t b = 0; b < v.size(); b += per) {
      size_t e = std::min(v.size(), b + per);
      Store::Sample m = *v[(b + e - 1) / 2];
      auto mean = [&](std::optional<double> Store::Sample::*f) -> std::optional<double> {
        double sum = 0;
        int n = 0;
        for (size_t i = b; i < e; ++i)
          if (v[i]->*f) sum += *(v[i]->*f), ++n;
        return n ? std::optional<double>(sum / n) : std::nullopt;
      };
      for (auto f :
           {&Store::Sample::util, &Store::Sample::mem_used_mib, &Store::Sample::mem_total_mib,
            &Store::Sample::power_w, &Store::Sample::temp_c})
        m.*f = mean(f);
      out.push_back(m);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.time_ms < b.time_ms; });
  return out;
}

}  // namespace

void Daemon::start_sampling() {
  if (cfg_.sample_interval_s <= 0) return;
  gpuinfo::SamplerConfig sampling = cfg_.sampler;
  sampling.processes = true;  // whose processes use the GPUs (daemon_watch.cc)
  sampler_ = std::make_unique<UsageSampler>(sampling, cfg_.sample_interval_s);
}

void Daemon::publish_targets() {
  if (!sampler_) return;
  std::vector<UsageSampler::Target> targets;
  for (const auto& [id, r] : runners_) targets.push_back({id, r.pid});  // pid = session leader
  if (targets == published_targets_) return;
  sampler_->set_targets(targets);
  published_targets_ = std::move(targets);
}

void Daemon::on_usage_ticks() {
  for (const auto& t : sampler_->take()) apply_tick(t);
}

void Daemon::apply_tick(const UsageSampler::Tick& t) {
  std::string problem = t.error;
  if (t.gpus) {
    last_gpus_ = *t.gpus;
    for (const auto& p : t.gpus->problems) problem += (problem.empty() ? "" : "; ") + p;
    if (!t.gpus->processes_error.empty())
      problem += (problem.empty() ? "" : "; ") + t.gpus->processes_error;
  }
  if (problem != sample_error_)  // said once when it starts, changes or ends, not every tick
    fmt::print(stderr, "gpuq daemon: GPU sampling: {}\n", problem.empty() ? "working" : problem);
  sample_error_ = problem;
  watch_gpus(t);
  std::vector<Store::Sample> rows;
  for (auto& [id, j] : jobs_->active()) {
    if (j.state != JobState::kRunning || t.time_ms < j.start_ms) continue;
    bool measured = false;
    for (int g : t.gpus ? j.gpus : std::vector<int>{}) {
      const gpuinfo::GpuSample* s = sample_of(*t.gpus, g);
      if (!s) continue;  // vanished or not listed: no figure rather than a zero
      rows.push_back({t.time_ms, g, id, s->util_percent, s->mem_used_mib, s->mem_total_mib,
                      s->power_w, s->temp_c});
      if (s->util_percent) {
        j.usage.util_samples += 1;
        j.usage.util_sum += *s->util_percent;
        j.usage.util_max = std::max(j.usage.util_max, *s->util_percent);
      }
      if (s->mem_used_mib) j.usage.mem_max_mib = std::max(j.usage.mem_max_mib, *s->mem_used_mib);
      measured = true;
    }
    if (auto p = t.jobs.find(id); p != t.jobs.end()) {
      j.usage.cpu_seconds = std::max(j.usage.cpu_seconds, p->second.cpu_seconds);
      j.usage.peak_rss_bytes = std::max(j.usage.peak_rss_bytes, p->second.peak_rss_bytes);
      measured = true;
    }
    if (!measured) continue;
    j.usage.last_sample_ms = t.time_ms;
    store_->update_job(j);
  }
  store_->insert_samples(rows);
  store_->delete_samples_before(t.time_ms - cfg_.sample_retention_s * 1000);
}

nlohmann::json Daemon::shards_json(int gpu, const std::vector<const Job*>* jobs, int64_t now) {
  if (!shards_of(gpu)) return nullptr;
  nlohmann::json briefs = nlohmann::json::array();
  int held = 0;
  for (const Job* j : jobs ? *jobs : std::vector<const Job*>{}) {
    held += j->shards;
    briefs.push_back(job_brief(*j, now));
  }
  return {{"total", shards_of(gpu)}, {"held", held}, {"jobs", briefs}};
}

nlohmann::json Daemon::mig_json(int id) const {
  auto m = cfg_.mig.find(id);
  if (m == cfg_.mig.end()) return nullptr;
  return {{"gpu", m->second.index},
          {"device", m->second.mig},
          {"profile", m->second.name},
          {"uuid", m->second.uuid}};
}

nlohmann::json Daemon::status_gpus(const std::map<int, const Job*>& holder,
                                   const std::map<int, std::vector<const Job*>>& sharers,
                                   int spark_points, int64_t now) {
  // Sparklines: each busy GPU's samples of the job that holds it now.
  std::map<int, nlohmann::json> spark;
  if (sampler_ && spark_points > 0)
    for (const auto& s :
         store_->samples_since(now - int64_t{spark_points} * cfg_.sample_interval_s * 1000)) {
      auto h = holder.find(s.gpu);
      if (h != holder.end() && h->second->id == s.job_id) spark[s.gpu].push_back(figure(s.util));
    }
  nlohmann::json gpus = nlohmann::json::array();
  for (int g : cfg_.gpus) {
    const gpuinfo::GpuSample* s = last_gpus_ ? sample_of(*last_gpus_, g) : nullptr;
    auto h = holder.find(g);
    auto f = [&](std::optional<double> gpuinfo::GpuSample::*field) {
      return figure(s ? s->*field : std::nullopt);
    };
    auto sh = sharers.find(g);
    const bool held = h != holder.end() || sh != sharers.end();
    auto idle_since = held ? watch_.low_since(g) : std::nullopt;
    gpus.push_back({{"id", g},
                    {"state", h != holder.end()      ? "busy"
                              : sh != sharers.end()  ? "shared"
                              : watch_.keeps_out(g) ? "outside"
                                                     : "free"},
                    {"shards", shards_json(g, sh == sharers.end() ? nullptr : &sh->second, now)},
                    {"outside", outside_json(g)},
                    {"busy_without_job", watch_.busy_flag(g, s, held)},
                    {"idle", held && watch_.idle_flag(g, now)},
                    {"idle_since_ms", idle_since ? nlohmann::json(*idle_since) : nlohmann::json()},
                    {"job", h != holder.end() ? job_brief(*h->second, now) : nlohmann::json()},
                    {"seen", s != nullptr},
                    {"name", s ? s->name : cfg_.mig.count(g) ? cfg_.mig.at(g).name : ""},
                    {"mig", mig_json(g)},
                    {"util_percent", f(&gpuinfo::GpuSample::util_percent)},
                    {"mem_used_mib", f(&gpuinfo::GpuSample::mem_used_mib)},
                    {"mem_total_mib", f(&gpuinfo::GpuSample::mem_total_mib)},
                    {"power_w", f(&gpuinfo::GpuSample::power_w)},
                    {"temp_c", f(&gpuinfo::GpuSample::temp_c)},
                    {"spark", spark.count(g) ? spark[g] : nlohmann::json::array()}});
  }
  return gpus;
}

nlohmann::json Daemon::op_status(const Request& req) {
  const int64_t now = now_ms();
  const size_t max_pending = req.max_pending;
  std::map<int, const Job*> holder;
  std::map<int, std::vector<const Job*>> sharers;
  nlohmann::json running = nlohmann::json::array(), pending = nlohmann::json::array();
  size_t pending_total = 0;
  for (const auto& [id, j] : jobs_->active()) {
    if (j.state == JobState::kRunning) {
      for (int g : j.gpus) {
        if (j.shards)
          sharers[g].push_back(&j);
        else
          holder[g] = &j;
      }
      running.push_back(job_brief(j, now));
    } else if (pending_total++ < max_pending) {
      auto b = job_brief(j, now);
      b["reason"] = pending_reason(j);
      b["position"] = j.position;
      b["expected_start_ms"] = j.expected_start_ms;
      pending.push_back(std::move(b));
    }
  }
  nlohmann::json history = nlohmann::json::array();
  auto done = store_->history({}, req.recent);
  for (auto it = done.rbegin(); it != done.rend(); ++it) history.push_back(job_brief(*it, now));
  constexpr int kStates = static_cast<int>(JobState::kNodeFail) + 1;  // the enum's last
  int64_t counts[kStates] = {};
  for (const auto& [id, st] : jobs_->states()) counts[static_cast<int>(st)] += 1;
  nlohmann::json by_state = nlohmann::json::object();
  for (int k = 0; k < kStates; ++k) by_state[state_name(static_cast<JobState>(k))] = counts[k];
  const std::map<std::string, double> seconds = accounting_->gpu_seconds_by_user(*jobs_, now);
  const GpuWatchConfig& w = watch_.config();
  nlohmann::json sampler = {{"interval_s", cfg_.sample_interval_s},
                            {"error", sample_error_},
                            {"processes_known", watch_.processes_known()},
                            {"outside_queue", w.avoid_outside ? "avoid" : "ignore"},
                            {"busy_percent", w.busy_percent},
                            {"idle_percent", w.idle_percent},
                            {"idle_after_s", w.idle_after_ms / 1000.0},
                            {"time_ms", last_gpus_ ? last_gpus_->time_ms : 0},
                            {"source", last_gpus_ ? last_gpus_->source : ""}};
  return {{"ok", true},
          {"host", host_},
          {"now_ms", now},
          {"draining", draining_},
          {"sampler", sampler},
          {"gpus", status_gpus(holder, sharers, static_cast<int>(req.spark_points), now)},
          {"running", running},
          {"pending", pending},
          {"pending_total", pending_total},
          {"recent", history},
          {"jobs_by_state", by_state},
          {"user_gpu_seconds", seconds},
          {"budgets", budgets_json(now)}};
}

nlohmann::json Daemon::op_stats(const Request& req) {
  auto ids = resolve_ids(req.ids);
  if (ids.empty()) throw std::invalid_argument("stats: no job id given");
  if (req.ids.size() > 1) throw std::invalid_argument("stats: one job id at a time");
  if (ids.size() > 1) return array_stats_reply(req.ids[0].text, ids);  // an array's tasks
  std::optional<Job> j = jobs_->any_job(ids[0]);
  if (!j) throw std::invalid_argument(fmt::format("invalid job id '{}'", ids[0]));
  return stats_reply(*j, req.max_points);
}

nlohmann::json Daemon::stats_reply(const Job& job, size_t max_points) {
  auto samples = store_->job_samples(job.id);
  // A reply carries at most kMaxSamplesPerReply samples (a week of 8 GPUs every 10 s is 480,000):
  // past it they are averaged down, as max_points asks, and the reply says so.
  const size_t per_gpu_cap = kMaxSamplesPerReply / std::max<size_t>(1, job.gpus.size());
  const bool capped =
      samples.size() > kMaxSamplesPerReply && (!max_points || max_points > per_gpu_cap);
  if (capped) max_points = per_gpu_cap;
  if (max_points) samples = downsample(samples, max_points);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : samples) rows.push_back(sample_json(s));
  return {{"ok", true},
          {"now_ms", now_ms()},
          {"job", job_brief(job, now_ms())},
          {"sample_interval_s", cfg_.sample_interval_s},
          {"sample_retention_s", cfg_.sample_retention_s},
          {"samples_averaged", capped},
          {"samples", rows}};
}

nlohmann::json Daemon::array_stats_reply(const std::string& array,
                                         const std::vector<int64_t>& tasks) {
  const int64_t now = now_ms();
  nlohmann::json briefs = nlohmann::json::array();
  for (int64_t id : tasks) {
    if (briefs.size() == kMaxTasksListed) break;
    if (std::optional<Job> j = jobs_->any_job(id)) briefs.push_back(job_brief(*j, now));
  }
  return {{"ok", true},
          {"now_ms", now},
          {"array", array},
          {"tasks", std::move(briefs)},
          {"tasks_total", tasks.size()}};
}

nlohmann::json Daemon::op_report(const Request& req) {
  const int64_t now = now_ms();
  const int64_t since = req.since_ms;
  const std::string& by = req.by;
  if (since > now)
    throw std::invalid_argument(fmt::format("report since {}: not a past time", since));
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : store_->report(
           since, now, by == "user" ? Store::ReportBy::kUser : Store::ReportBy::kAccount))
    rows.push_back({{"key", r.key},
                    {"jobs", r.jobs},
                    {"gpu_hours", r.gpu_seconds / 3600.0},
                    {"util_mean", r.util_samples ? nlohmann::json(r.util_sum / r.util_samples)
                                                 : nlohmann::json(nullptr)}});
  return {{"ok", true}, {"since_ms", since}, {"now_ms", now}, {"by", by}, {"rows", rows}};
}

}  // namespace gpurun::queue

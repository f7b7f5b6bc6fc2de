// gpuq daemon: GPU-hour budgets (issue 29, item 4). Root or the daemon's owner gives a user, or an
// account ("@physics"), GPU-hours per week, per month or in total (`gpuq budget set`). What is
// spent is the GPU time (a shard job's share: gpu_share) of the subject's jobs inside the current
// period, running jobs up to now, as `gpuq report` sums it. A pending job whose start would take
// its user or its account past a budget (what is spent, what running jobs may still spend, and
// its GPUs times its time limit when it has one) waits with Slurm's reason AssocGrpGRESMinutes;
// raising the budget lets it start.
// Running jobs go on when a budget runs out, as in Slurm, unless the daemon runs with
// --enforce-budgets, which cancels them. Budgets live in the store: restarts and kill -9 keep them.
#include <fmt/format.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "daemon/daemon.h"
#include "daemon/store.h"
#include "gpurun/common/posix.h"
#include "supervise/runfiles.h"

namespace gpurun::queue {

namespace {

constexpr int64_t kDayMs = 86'400'000;

bool user_exists(const std::string& name) {
  return common::passwd_entry(name).has_value();
}

// Whether budget b is the job's: its user's, or its account's ("@account").
bool covers(const Store::Budget& b, const Job& j) {
  return b.subject == j.user || (!j.account.empty() && b.subject == "@" + j.account);
}

}  // namespace

// The start of the period that holds now_ms, in UTC: Monday 00:00 of the week, the 1st of the
// month at 00:00, or the epoch for a total.
int64_t budget_period_start(const std::string& period, int64_t now_ms) {
  if (period == "week") {
    const int64_t day = now_ms / kDayMs;  // day 0, 1970-01-01, was a Thursday
    return (day - (day + 3) % 7) * kDayMs;
  }
  if (period != "month") return 0;
  time_t t = static_cast<time_t>(now_ms / 1000);
  struct tm tm {};
  gmtime_r(&t, &tm);
  tm.tm_mday = 1;
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

// One usage report per period start and grouping, however many budgets share them (one query a
// budget before).
std::vector<Daemon::BudgetUse> Daemon::budget_uses(int64_t now) {
  std::map<std::pair<int64_t, Store::ReportBy>, std::map<std::string, double>> reports;
  std::vector<BudgetUse> out;
  for (auto& b : store_->budgets()) {
    const bool account = b.subject[0] == '@';
    const int64_t since = budget_period_start(b.period, now);
    const Store::ReportBy by = account ? Store::ReportBy::kAccount : Store::ReportBy::kUser;
    auto [report, fresh] = reports.try_emplace({since, by});
    if (fresh)
      for (const auto& row : store_->report(since, now, by))
        report->second[row.key] = row.gpu_seconds;
    const auto it = report->second.find(account ? b.subject.substr(1) : b.subject);
    const double seconds = it == report->second.end() ? 0 : it->second;
    out.push_back({std::move(b), seconds / 3600.0, 0.0, since});
  }
  for (const auto& [id, j] : jobs_->active()) {
    if (j.state != JobState::kRunning || j.time_limit_s <= 0) continue;
    const int64_t left_ms = std::max<int64_t>(0, j.start_ms + j.time_limit_s * 1000 - now);
    for (auto& u : out)
      if (covers(u.budget, j)) u.committed_hours += gpu_share(j) * double(left_ms) / 3.6e6;
  }
  return out;
}

// What a pending job would spend at most: its GPUs (a shard job's share) times its time limit;
// 0 without a limit, which cannot be told ahead.
double Daemon::budget_need_hours(const Job& j) const {
  if (j.time_limit_s <= 0) return 0.0;
  const double gpus =
      j.shards ? double(j.shards) / std::max(1, most_shards()) : double(j.gpus_requested);
  return gpus * double(j.time_limit_s) / 3600.0;
}

// A job waits when what is spent, what running jobs may still spend, and its own need would
// pass a budget of its: four tasks of an array, each within what was left, all started at once
// and together spent 3.5 times it.
const char* Daemon::budget_reason(const Job& j, const std::vector<BudgetUse>& uses) const {
  const double need_h = budget_need_hours(j);
  for (const auto& u : uses) {
    const double used = u.spent_hours + u.committed_hours;
    if (covers(u.budget, j) && (used >= u.budget.hours || used + need_h > u.budget.hours))
      return "AssocGrpGRESMinutes";
  }
  return nullptr;
}

// A job this pass starts counts against its budgets for the rest of the pass.
void Daemon::reserve_budget(const Job& j, std::vector<BudgetUse>& uses) const {
  for (auto& u : uses)
    if (covers(u.budget, j)) u.committed_hours += budget_need_hours(j);
}

nlohmann::json Daemon::budgets_json(int64_t now) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& u : budget_uses(now))
    rows.push_back({{"subject", u.budget.subject},
                    {"hours", u.budget.hours},
                    {"period", u.budget.period},
                    {"period_start_ms", u.period_start_ms},
                    {"spent_hours", u.spent_hours},
                    {"left_hours", std::max(0.0, u.budget.hours - u.spent_hours)},
                    {"set_ms", u.budget.set_ms}});
  return rows;
}

nlohmann::json Daemon::op_budget(const Request& req) {
  nlohmann::json rows = nlohmann::json::array();
  for (auto& row : budgets_json(now_ms()))
    if (req.subject.empty() || row["subject"] == req.subject) rows.push_back(std::move(row));
  return {{"ok", true}, {"now_ms", now_ms()}, {"budgets", rows}};
}

nlohmann::json Daemon::op_budget_set(const Request& req, const Peer& peer) {
  if (peer.uid != 0 && peer.uid != geteuid())
    throw std::invalid_argument(
        "permission denied: only root or the user the gpuq daemon runs as sets budgets");
  if (req.subject[0] != '@' && !user_exists(req.subject))
    throw std::invalid_argument(
        fmt::format("budget for '{}': no such user on this machine (an account is written @NAME)",
                    req.subject));
  if (!req.hours) {
    store_->clear_budget(req.subject);
    fmt::print(stderr, "gpuq daemon: budget of {} cleared by uid {}\n", req.subject, peer.uid);
  } else {
    store_->set_budget({req.subject, *req.hours, req.period, now_ms()});
    fmt::print(stderr, "gpuq daemon: budget of {}: {:g} GPU-hours {} (set by uid {})\n",
               req.subject, *req.hours, req.period == "total" ? "in total" : "per " + req.period,
               peer.uid);
  }
  dirty_ = true;  // a raised budget may start jobs now
  return op_budget(req);
}

void Daemon::enforce_budgets(int64_t now) {
  if (!cfg_.enforce_budgets || now - budgets_checked_ms_ < 1000) return;
  budgets_checked_ms_ = now;
  const auto uses = budget_uses(now);
  if (uses.empty()) return;
  for (auto& [id, j] : jobs_->active()) {
    if (j.state != JobState::kRunning || j.cancel_requested) continue;
    for (const auto& u : uses) {
      if (!covers(u.budget, j) || u.spent_hours < u.budget.hours) continue;
      log_event(j, fmt::format("cancelled: the budget of {} is spent ({:.2f} of {:g} GPU-hours; "
                               "--enforce-budgets)",
                               u.budget.subject, u.spent_hours, u.budget.hours));
      j.cancel_requested = true;
      j.reason = fmt::format("AssocGrpGRESMinutes: the budget of {} is spent", u.budget.subject);
      store_->update_job(j);  // durable first: a restarted daemon re-sends the cancel
      if (auto r = runners_.find(id); r != runners_.end()) ::kill(r->second.pid, SIGTERM);
      break;
    }
  }
}

}  // namespace gpurun::queue

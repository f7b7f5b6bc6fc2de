// supervisor_hang.cc: --hang-timeout (supervisor.h): when no rank progresses for S seconds, or one
// rank's step stays behind the others' without advancing for S seconds, gpurun asks every wrapper
// for its rank's stacks, writes them to --output-dir (or gpurun-JOBID-hang/), prints where each
// rank is, and stops the job with kHangStatus.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "stacks/stacks.h"
#include "supervisor/supervisor.h"

namespace gpurun::launcher {
namespace {

constexpr double kStackWait = 12.0;  // for every wrapper's STACKS (each bounds its tools at 6 s)

}  // namespace

void Supervisor::check_hang() {
  if (stopping_ || hang_) return;
  const double now = proc::now_seconds(), s = cfg_.hang_timeout;
  timers_.set(Timer::hang_check, now + std::min(1.0, s / 4));
  double latest = 0;
  std::int64_t top = -1;
  for (const auto& r : ranks_) {
    if (!r.running || r.exited) continue;
    latest = std::max(latest, r.last_progress);
    top = std::max(top, r.step);
  }
  if (latest == 0) return;  // every rank has ended
  if (now - latest >= s) {
    begin_hang(fmt::format("no rank made progress for {:.0f} s", s));
    return;
  }
  for (int i = 0; i < world_; ++i) {
    RankState& r = rank(i);
    if (!behind(r, top))
      r.behind_since = 0;
    else if (r.behind_since == 0)
      r.behind_since = now;
    if (stuck_behind(r, top, now)) {
      begin_hang(fmt::format("rank {}'s step ({}) stayed behind the others' ({}) for {:.0f} s", i,
                             r.step, top, s));
      return;
    }
  }
}

// Running, and its step below the highest; a rank that never beat (it only prints) has no step.
bool Supervisor::behind(const RankState& r, std::int64_t top) {
  return r.running && !r.exited && r.step >= 0 && r.step < top;
}

// Behind the highest step for --hang-timeout seconds, and not one step further meanwhile. A
// slower rank that still advances is not stuck, nor are ranks that all sat on one long step (an
// evaluation) until the first moves on.
bool Supervisor::stuck_behind(const RankState& r, std::int64_t top, double now) const {
  return behind(r, top) && r.behind_since > 0 &&
         now - std::max(r.step_since, r.behind_since) >= cfg_.hang_timeout;
}

void Supervisor::begin_hang(const std::string& why) {
  hang_ = why;
  tell(fmt::format("{}: the job hangs; collecting every rank's stacks", why));
  broadcast(control::DumpStacks{});
  timers_.set(Timer::stacks, proc::now_seconds() + kStackWait);
}

std::string Supervisor::hang_dir() const {
  if (cfg_.output_dir) return *cfg_.output_dir;
  return fmt::format("gpurun-{}-hang",
                     cfg_.alloc.job_id ? *cfg_.alloc.job_id : fmt::format("local-{}", getpid()));
}

// Every rank's stacks to DIR/rank-N.stack, and one line that groups the ranks by where they are.
void Supervisor::finish_hang() {
  if (stopping_) return;
  std::string dir = hang_dir();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::int64_t top = -1;
  for (const auto& r : ranks_) top = std::max(top, r.step);
  const double now = proc::now_seconds();
  std::vector<stacks::RankWhere> where;
  for (int i = 0; i < world_; ++i) {
    const RankState& r = rank(i);
    std::string text = r.stacks   ? *r.stacks
                       : r.exited ? "(this rank had already ended)\n"
                                  : fmt::format(
                                        "(no stacks from this rank's wrapper within {:.0f} "
                                        "s)\n",
                                        kStackWait);
    std::string path = fmt::format("{}/rank-{}.stack", dir, i);
    common::Fd fd(open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd || !common::write_all(fd.get(), text))
      tell(fmt::format("cannot write {}: {}", path, strerror(errno)));
    // Behind, and its step unchanged for --hang-timeout: the job hangs by now, so how long it
    // has been behind does not matter (when no rank progressed, that can be a moment shorter).
    const bool unmoved = behind(r, top) && now - r.step_since >= cfg_.hang_timeout;
    if (r.running && !r.exited)
      where.push_back({i, r.stacks ? stacks::where(*r.stacks) : "no stacks", unmoved});
  }
  tell(fmt::format("stacks of all {} ranks in {}/", world_, dir));
  tell(stacks::hang_summary(where));
  begin_stop("");
  failure_ = Failure{-1, "", "hung", kHangStatus, proc::now_seconds() - t0_, true};
}

}  // namespace gpurun::launcher

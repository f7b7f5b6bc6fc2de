// supervisor_hang.cc: --hang-timeout (supervisor.h): when no rank progresses for S seconds, or one
// rank's step stays behind the others' without advancing for S seconds, gpurun asks every wrapper
// for its rank's stacks, writes them to --output-dir (or gpurun-JOBID-hang/), prints where each
// rank is, and stops the job with kHangStatus.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "alloc/env_util.h"
#include "stacks/stacks.h"
#include "supervisor/supervisor.h"
#include "sys/system.h"

namespace gpurun::launcher {
namespace {

constexpr double kStackWait = 12.0;  // for every wrapper's STACKS (each bounds its tools at 6 s)

}  // namespace

void Supervisor::check_hang() {
  if (attempt_.stopping() || attempt_.hung()) return;
  const double now = proc::now_seconds(), s = cfg_.hang_timeout;
  timers_.set(Timer::hang_check, now + std::min(1.0, s / 4));
  std::optional<Attempt::Hang> h = attempt_.find_hang(now);
  if (!h) return;
  if (h->rank < 0)
    begin_hang(fmt::format("no rank made progress for {:.0f} s", s));
  else
    begin_hang(fmt::format("rank {}'s step ({}) stayed behind the others' ({}) for {:.0f} s",
                           h->rank, h->step, h->top, s));
}

void Supervisor::begin_hang(const std::string& why) {
  attempt_.mark_hung(why);
  tell(fmt::format("{}: the job hangs; collecting every rank's stacks", why));
  broadcast(control::DumpStacks{});
  timers_.set(Timer::stacks, proc::now_seconds() + kStackWait);
}

// --output-dir, else gpurun-JOBID-hang/ in the working folder; where that cannot be made (a
// folder gpurun may not write, such as /proc), a new folder gpurun-JOBID-hang-XXXXXX under
// $TMPDIR (or /tmp), said in a line: made by mkdtemp, never one another user made first under a
// name known ahead. nullopt when neither can be made.
std::optional<std::string> Supervisor::hang_dir() const {
  const std::string name = fmt::format(
      "gpurun-{}-hang", cfg_.alloc.job_id ? *cfg_.alloc.job_id : fmt::format("local-{}", getpid()));
  const std::string first = cfg_.output_dir ? *cfg_.output_dir : name;
  const std::error_code ec = sys::make_private_dirs(first);
  if (!ec) return first;
  std::string fallback = fmt::format("{}/{}-XXXXXX", detail::temp_dir(cfg_.env), name);
  if (!mkdtemp(fallback.data())) {  // mode 0700
    tell(fmt::format("cannot make {} ({}) nor {} ({}): the stacks are not kept", first,
                     ec.message(), fallback, strerror(errno)));
    return std::nullopt;
  }
  tell(fmt::format("cannot make {} ({}): the stacks go to {}/", first, ec.message(), fallback));
  return fallback;
}

// Every rank's stacks to DIR/rank-N.stack, and one line that groups the ranks by where they are.
void Supervisor::finish_hang() {
  if (attempt_.stopping()) return;
  const std::optional<std::string> dir = hang_dir();
  const std::int64_t top = attempt_.top_step();
  const double now = proc::now_seconds();
  std::vector<stacks::RankWhere> where;
  int written = 0;
  for (int i = 0; i < world_; ++i) {
    const Attempt::Rank& r = attempt_.rank(i);
    if (dir) written += write_stack_file(*dir, i, r) ? 1 : 0;
    const bool unmoved = attempt_.unmoved(r, top, now);
    if (r.running && !r.exited)
      where.push_back({i, r.stacks ? stacks::where(*r.stacks) : "no stacks", unmoved});
  }
  // Only the files that were written are claimed.
  if (written == world_)
    tell(fmt::format("stacks of all {} ranks in {}/", world_, *dir));
  else if (written > 0)
    tell(fmt::format("stacks of {} of the {} ranks in {}/", written, world_, *dir));
  tell(stacks::hang_summary(where));
  begin_stop("");
  attempt_.fail(-1, "hung", kHangStatus, proc::now_seconds() - t0_);
}

// Rank i's stacks (or why there are none) to DIR/rank-I.stack; false, said in a line, when the
// file cannot be written.
bool Supervisor::write_stack_file(const std::string& dir, int i, const Attempt::Rank& r) const {
  std::string text =
      r.stacks ? *r.stacks
      : r.exited
          ? "(this rank had already ended)\n"
          : fmt::format("(no stacks from this rank's wrapper within {:.0f} s)\n", kStackWait);
  std::string path = fmt::format("{}/rank-{}.stack", dir, i);
  common::Fd fd(open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                     sys::kPrivateFileMode));
  if (fd && common::write_all(fd.get(), text)) return true;
  tell(fmt::format("cannot write {}: {}", path, strerror(errno)));
  return false;
}

}  // namespace gpurun::launcher

// Mail about jobs through sendmail (mailer.h).
#include "daemon/mailer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "gpurun/common/posix.h"
#include "gpurun/common/terminal.h"

extern char** environ;

namespace gpurun::queue {

common::Fd unlinked_input(const std::string& dir, const std::string& text) {
  std::string path = dir + "/input-XXXXXX";
  common::Fd fd(::mkostemp(path.data(), O_CLOEXEC));
  if (!fd) throw std::runtime_error(fmt::format("cannot create {}: {}", path, strerror(errno)));
  ::unlink(path.c_str());
  if (!common::write_all(fd.get(), text) || ::lseek(fd.get(), 0, SEEK_SET) != 0)
    throw std::runtime_error(fmt::format("cannot write {}: {}", path, strerror(errno)));
  return fd;
}

Mailer::Mailer(std::string sendmail, std::string scratch_dir)
    : sendmail_(std::move(sendmail)), scratch_dir_(std::move(scratch_dir)) {}

bool Mailer::send(const Mail& m, int64_t job_id) const {
  try {
    const std::string text =
        fmt::format("To: {}\nSubject: {}\nContent-Type: text/plain; charset=utf-8\n\n{}", m.to,
                    common::escape_control(m.subject), m.body);
    common::Fd in = unlinked_input(scratch_dir_, text);  // sendmail reads it whatever its size
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in.get(), 0);
    // -t: the recipients are the To: line's (checked), never an argument; -oi: a lone "." in the
    // body does not end it.
    char* argv[] = {const_cast<char*>("sendmail"), const_cast<char*>("-t"),
                    const_cast<char*>("-oi"), nullptr};
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, sendmail_.c_str(), &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error(fmt::format("{}: {}", sendmail_, strerror(rc)));
    return true;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpuq daemon: job {}: mail to {} not sent: {}\n", job_id, m.to, e.what());
    return false;
  }
}

}  // namespace gpurun::queue

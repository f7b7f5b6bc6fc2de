// rank_folder.cc: see rank_folder.h.
#include "wrapper/rank_folder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "gpurun/common/posix.h"
#include "gpurun/launcher/error.h"
#include "stacks/stacks.h"

namespace gpurun::launcher {

std::optional<std::int64_t> parse_heartbeat(std::string_view s) {
  // Lenient about padding on either side: a right-aligned fixed-width field is a fair reading.
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  std::size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  for (std::size_t i = digits; i < s.size(); ++i)
    if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t' && s[i] != '\0')
      return std::nullopt;
  std::int64_t v = 0;
  std::from_chars(s.data(), s.data() + digits, v);
  return v;
}

RankDir RankDir::create(const std::string& tmpdir, int rank) {
  RankDir d;
  try {  // owned from here: removed on the errors below too
    // Folders of wrappers that died without cleaning up (an engine that SIGKILLs its tasks as
    // it aborts, as mpirun does; a wrapper killed by hand) go as the next one here starts.
    d.dir_ = proc::TempDir::create_owned(tmpdir, fmt::format("gpurun-{}-", common::hostname()),
                                         fmt::format("rank{}-", rank),
                                         fmt::format("rank {}'s folder", rank));
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (set TMPDIR?)");
  }
  // The rank's alone: mkdtemp made the folder 0700.
  common::Fd hb(open(d.heartbeat().c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  if (!hb || mkdir(d.python_dir().c_str(), 0700) != 0 || mkdir(d.pystack_dir().c_str(), 0700) != 0)
    throw Error(fmt::format("rank {}: cannot populate {}: {}", rank, d.path(), strerror(errno)));
  common::Fd py(open((d.python_dir() + "/sitecustomize.py").c_str(),
                     O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600));
  if (!py || !common::write_all(py.get(), stacks::python_shim()))
    throw Error(fmt::format("rank {}: cannot write {}/sitecustomize.py: {}", rank, d.python_dir(),
                            strerror(errno)));
  return d;
}

std::optional<std::int64_t> RankDir::read_step() const {
  common::Fd fd(open(heartbeat().c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  char buf[64];
  ssize_t n = pread(fd.get(), buf, sizeof buf, 0);
  if (n <= 0) return std::nullopt;
  return parse_heartbeat(std::string_view(buf, static_cast<std::size_t>(n)));
}

}  // namespace gpurun::launcher

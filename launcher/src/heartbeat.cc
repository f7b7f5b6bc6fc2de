// heartbeat.cc: see heartbeat.h.
#include "heartbeat.h"

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
#include "stacks.h"

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
  std::string tmpl = fmt::format("{}/gpurun-rank{}-XXXXXX", tmpdir, rank);
  if (!mkdtemp(tmpl.data()))
    throw Error(fmt::format("rank {}: cannot create its folder in {}: {} (set TMPDIR?)", rank,
                            tmpdir, strerror(errno)));
  RankDir d;
  d.path_ = tmpl;  // owned from here: removed on the errors below too
  // The rank's alone: mkdtemp made the folder 0700.
  common::Fd hb(open(d.heartbeat().c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  if (!hb || mkdir(d.python_dir().c_str(), 0700) != 0 || mkdir(d.pystack_dir().c_str(), 0700) != 0)
    throw Error(fmt::format("rank {}: cannot populate {}: {}", rank, tmpl, strerror(errno)));
  common::Fd py(open((d.python_dir() + "/sitecustomize.py").c_str(),
                     O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600));
  if (!py || !common::write_all(py.get(), stacks::python_shim()))
    throw Error(fmt::format("rank {}: cannot write {}/sitecustomize.py: {}", rank, d.python_dir(),
                            strerror(errno)));
  return d;
}

RankDir& RankDir::operator=(RankDir&& o) noexcept {
  if (this != &o) {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

RankDir::~RankDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
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

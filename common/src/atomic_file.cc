// atomic_file.cc: write_file_atomic and the removal of dead writers' temp files (atomic_file.h).
#include "gpurun/common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "gpurun/common/error.h"
#include "gpurun/common/posix.h"

namespace gpurun::common {
namespace {

constexpr const char* kTempMarker = ".tmp.";

// "BOOT.PID.START": this process, for its whole life.
const std::string& owner() {
  static const std::string o = [] {
    const long pid = long(::getpid());
    return boot_id() + "." + std::to_string(pid) + "." +
           std::to_string(process_start_time(pid).value_or(0));
  }();
  return o;
}

std::string temp_name(const std::string& path) {
  static std::atomic<unsigned long> count{0};
  return path + kTempMarker + owner() + "." + std::to_string(count++);
}

std::pair<std::string, std::string> split_path(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw Error(path + ": " + what + ": " + std::strerror(err));
}

void fsync_folder(const std::string& path) {
  Fd d(::open(split_path(path).first.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d) ::fsync(d.get());  // best effort: some file systems refuse a folder's fsync
}

// Whether the writer that `rest` ("BOOT.PID.START[.N]") names is certainly dead.
bool writer_is_dead(const std::string& rest) {
  const std::string boot = boot_id();
  if (boot.empty() || rest.compare(0, boot.size(), boot) != 0 || rest.size() <= boot.size() ||
      rest[boot.size()] != '.')
    return false;
  const char* p = rest.c_str() + boot.size() + 1;
  char* end = nullptr;
  const long pid = std::strtol(p, &end, 10);
  if (end == p || *end != '.' || pid <= 0) return false;
  p = end + 1;
  const unsigned long long start = std::strtoull(p, &end, 10);
  if (end == p || (*end != '\0' && *end != '.')) return false;
  const auto now = process_start_time(pid);
  return !now || *now != start;
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view content, mode_t mode,
                       Durability durability) {
  const std::string tmp = temp_name(path);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) fail(path, "cannot create " + tmp, errno);
  const bool written =
      write_all(fd.get(), content) && (durability == Durability::kNoSync || ::fsync(fd.get()) == 0);
  const int err = errno;
  fd.reset();
  if (!written) {
    ::unlink(tmp.c_str());
    fail(path, "cannot write " + tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, "cannot rename " + tmp + " into place", e);
  }
  if (durability == Durability::kFsync) fsync_folder(path);
}

int remove_dead_temp_files(const std::string& path) {
  const auto [folder, name] = split_path(path);
  const std::string prefix = name + kTempMarker;
  int removed = 0;
  for (const std::string& entry : list_dir(folder).value_or(std::vector<std::string>{})) {
    if (entry.compare(0, prefix.size(), prefix) != 0) continue;
    if (!writer_is_dead(entry.substr(prefix.size()))) continue;
    if (::unlink((folder + "/" + entry).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace gpurun::common

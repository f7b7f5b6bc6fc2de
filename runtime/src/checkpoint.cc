// checkpoint.cc: binary checkpoint format ("GPRNCKP1", little-endian fields, FNV-1a checksum at
// the end), its atomic write, and the removal of dead writers' temp files.
#include "gpurun/runtime/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>

#include "gpurun/common/posix.h"

namespace gpurun::runtime {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'R', 'N', 'C', 'K', 'P', '1'};

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_floats(std::string& out, const std::vector<float>& v) {
  put(out, std::uint64_t(v.size()));
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : b_(bytes), path_(path) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::vector<float> floats() {
    const auto n = get<std::uint64_t>();
    if (n > (b_.size() - pos_) / sizeof(float)) fail("truncated (a tensor runs past the end)");
    std::vector<float> v(n);
    std::memcpy(v.data(), b_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return v;
  }
  std::size_t pos() const { return pos_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error(path_ + ": not a usable checkpoint: " + why);
  }

 private:
  void need(std::size_t n) const {
    if (b_.size() - pos_ < n) fail("truncated");
  }
  const std::string& b_;
  std::string path_;
  std::size_t pos_ = 0;
};

// A temp file's name says whose it is: "checkpoint.bin.tmp.BOOT.PID.START" (boot id, pid, the
// process's start time), so that a later run can tell a dead writer's leftover from a live
// writer's file without trusting a bare pid, which the kernel reuses.
constexpr const char* kTempMarker = ".tmp.";

std::string temp_suffix() {
  static const std::string suffix = [] {
    const long pid = long(::getpid());
    return kTempMarker + common::boot_id() + "." + std::to_string(pid) + "." +
           std::to_string(common::process_start_time(pid).value_or(0));
  }();
  return suffix;
}

// Whether the writer that `owner` ("BOOT.PID.START") names is certainly dead. Only this boot's
// files are judged: another boot id is an earlier boot or another machine sharing the file
// system, which cannot be told apart. Dead: no process has the pid, or the one that has it
// started at another time (the pid was reused). Anything unparsable is left alone.
bool writer_is_dead(const std::string& owner) {
  const std::size_t a = owner.find('.');
  const std::size_t b = a == std::string::npos ? a : owner.find('.', a + 1);
  const std::string boot = common::boot_id();
  if (b == std::string::npos || boot.empty() || owner.compare(0, a, boot) != 0 || a != boot.size())
    return false;
  char* end = nullptr;
  const long pid = std::strtol(owner.c_str() + a + 1, &end, 10);
  if (end != owner.c_str() + b || pid <= 0) return false;
  const std::uint64_t start = std::strtoull(owner.c_str() + b + 1, &end, 10);
  if (end == owner.c_str() + b + 1 || *end != '\0') return false;
  const auto now = common::process_start_time(pid);
  return !now || *now != start;
}

}  // namespace

std::string checkpoint_path(const std::string& dir) {
  return dir + "/checkpoint.bin";
}

bool checkpoint_exists(const std::string& dir) {
  struct stat st;
  return ::stat(checkpoint_path(dir).c_str(), &st) == 0;
}

int prepare_checkpoint_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error(dir +
                             ": cannot create the checkpoint directory: " + std::strerror(errno));
  }
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) {
    throw std::runtime_error(dir +
                             ": cannot read the checkpoint directory: " + std::strerror(errno));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw std::runtime_error(dir + ": cannot write checkpoints there: " + std::strerror(errno));
  }
  const std::string prefix = std::string("checkpoint.bin") + kTempMarker;
  int removed = 0;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!writer_is_dead(name.substr(prefix.size()))) continue;
    if (::unlink((dir + "/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

void save_checkpoint(const std::string& dir, const Checkpoint& c) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error(dir +
                             ": cannot create the checkpoint directory: " + std::strerror(errno));
  }
  std::string out(kMagic, sizeof kMagic);
  put(out, c.seed);
  put(out, c.world_size);
  put(out, c.batch_per_rank);
  put(out, c.epoch);
  put(out, c.step);
  put(out, c.global_step);
  put(out, c.epoch_loss_sum);
  put(out, c.epoch_correct);
  put(out, c.epoch_seen);
  put_floats(out, c.params);
  put_floats(out, c.velocity);
  put(out, fnv1a(out));

  const std::string final_path = checkpoint_path(dir);
  const std::string tmp = final_path + temp_suffix();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(tmp + ": cannot create: " + std::strerror(errno));
  try {
    if (!common::write_all(fd, out)) {
      throw std::runtime_error(tmp + ": write failed: " + std::strerror(errno));
    }
    if (::fsync(fd) != 0) throw std::runtime_error(tmp + ": fsync failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(final_path + ": rename from " + tmp + " failed: " + std::strerror(e));
  }
  // The rename is durable only once the directory entry is on disk.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open checkpoint: " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Reader r(bytes, path);
  if (bytes.size() < sizeof kMagic + 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    r.fail("wrong magic (expected GPRNCKP1)");
  }
  const std::string body = bytes.substr(0, bytes.size() - 8);
  std::uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (fnv1a(body) != sum) r.fail("checksum mismatch (truncated or corrupt)");
  Reader b(body, path);
  b.get<std::uint64_t>();  // magic
  Checkpoint c;
  c.seed = b.get<std::uint64_t>();
  c.world_size = b.get<std::int32_t>();
  c.batch_per_rank = b.get<std::int32_t>();
  c.epoch = b.get<std::int64_t>();
  c.step = b.get<std::int64_t>();
  c.global_step = b.get<std::int64_t>();
  c.epoch_loss_sum = b.get<double>();
  c.epoch_correct = b.get<double>();
  c.epoch_seen = b.get<double>();
  c.params = b.floats();
  c.velocity = b.floats();
  if (b.pos() != body.size()) b.fail("trailing bytes after the last tensor");
  return c;
}

}  // namespace gpurun::runtime

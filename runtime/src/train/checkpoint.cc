// checkpoint.cc: binary checkpoint format ("GPRNCKP1", little-endian fields, FNV-1a checksum at
// the end), its atomic write, and the removal of dead writers' temp files.
#include "train/checkpoint.h"

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

#include "gpurun/common/atomic_file.h"
#include "gpurun/common/strings.h"

namespace gpurun::runtime {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'R', 'N', 'C', 'K', 'P', '1'};

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
  return common::remove_dead_temp_files(checkpoint_path(dir));
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
  put(out, common::fnv1a(out));

  common::write_file_atomic(checkpoint_path(dir), out, 0644, common::Durability::kFsync);
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
  if (common::fnv1a(body) != sum) r.fail("checksum mismatch (truncated or corrupt)");
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

bool rescale_position(Checkpoint& c, int world, int batch_per_rank, std::int64_t steps_per_epoch) {
  const std::int64_t was = std::int64_t(c.world_size) * c.batch_per_rank;
  const std::int64_t now = std::int64_t(world) * batch_per_rank;
  if (was <= 0 || now <= 0 || was == now) return false;
  c.step = c.step * was / now;
  c.global_step = c.global_step * was / now;
  if (c.step >= steps_per_epoch) {
    ++c.epoch;
    c.step = 0;
    c.epoch_loss_sum = c.epoch_correct = c.epoch_seen = 0;
  }
  c.world_size = world;
  c.batch_per_rank = batch_per_rank;
  return true;
}

}  // namespace gpurun::runtime

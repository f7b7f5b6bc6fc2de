// idx.cc: IDX parsing, raw or gzip (zlib). A file is read as a stream: the header first, then
// exactly the bytes its dimensions declare, so memory never exceeds what the header declares and
// the file can hold (a header's product that overflows, or that declares more than the file can
// hold, is refused before anything is allocated; a gz bomb is cut off at the declared size).
#include "gpurun/runtime/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

#include "gpurun/common/posix.h"

namespace gpurun::runtime {
namespace {

// Deflate never expands more than about 1032:1 (each 258-byte match costs at least two bits);
// a gzip file that would need more to hold its header's data is refused unread.
constexpr std::uint64_t kMaxDeflateRatio = 1032;
constexpr std::size_t kChunk = std::size_t(1) << 16;

std::size_t element_size(IdxType t, const std::string& name) {
  switch (t) {
    case IdxType::kUint8:
    case IdxType::kInt8:
      return 1;
    case IdxType::kInt16:
      return 2;
    case IdxType::kInt32:
    case IdxType::kFloat32:
      return 4;
    case IdxType::kFloat64:
      return 8;
  }
  throw IdxError(name + ": unknown IDX element type 0x" + std::to_string(int(t)));
}

std::string dims_text(const std::vector<std::uint32_t>& dims) {
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

// Where a stream of bytes comes from: the file as it is, or inflated.
class Source {
 public:
  virtual ~Source() = default;
  // Up to n bytes into dst; 0 only at the end. Throws IdxError naming the file.
  virtual std::size_t read(std::uint8_t* dst, std::size_t n) = 0;
  // Fills exactly n bytes; false when the stream ends first (`got` says how many came).
  bool read_exact(std::uint8_t* dst, std::size_t n, std::size_t* got = nullptr) {
    std::size_t have = 0;
    while (have < n) {
      const std::size_t k = read(dst + have, n - have);
      if (k == 0) break;
      have += k;
    }
    if (got) *got = have;
    return have == n;
  }
};

class RawSource final : public Source {
 public:
  RawSource(int fd, const std::string& path) : fd_(fd), path_(path) {}
  // Bytes read ahead (the gzip magic) that the next reads return first.
  void unread(const std::uint8_t* p, std::size_t n) { ahead_.assign(p, p + n); }
  std::size_t read(std::uint8_t* dst, std::size_t n) override {
    if (!ahead_.empty()) {
      const std::size_t k = std::min(n, ahead_.size());
      std::memcpy(dst, ahead_.data(), k);
      ahead_.erase(ahead_.begin(), ahead_.begin() + std::ptrdiff_t(k));
      return k;
    }
    for (;;) {
      const ssize_t k = ::read(fd_, dst, n);
      if (k >= 0) return std::size_t(k);
      if (errno != EINTR) throw IdxError(path_ + ": read error (" + std::strerror(errno) + ")");
    }
  }

 private:
  int fd_;
  std::string path_;
  std::vector<std::uint8_t> ahead_;
};

// Every member of a multi-member gzip file, in order, as gzip -d gives them; anything after the
// last member that is not another member is an error, never ignored.
class GzipSource final : public Source {
 public:
  GzipSource(RawSource& in, const std::string& path) : in_(in), path_(path), buf_(kChunk) {
    if (inflateInit2(&zs_, 15 + 16) != Z_OK) throw IdxError(path + ": zlib inflateInit failed");
  }
  ~GzipSource() override { inflateEnd(&zs_); }
  std::size_t read(std::uint8_t* dst, std::size_t n) override {
    if (n == 0) return 0;
    zs_.next_out = dst;
    zs_.avail_out = uInt(std::min<std::size_t>(n, kChunk));
    const uInt want = zs_.avail_out;
    while (zs_.avail_out == want && !done_) {
      if (member_ended_ && !next_member()) break;
      if (zs_.avail_in == 0 && !refill()) {
        throw IdxError(path_ + ": truncated gzip stream (unexpected end of file)");
      }
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw IdxError(path_ + ": corrupt gzip data (" + (zs_.msg ? zs_.msg : "zlib error") + ")");
      }
    }
    return want - zs_.avail_out;
  }

 private:
  bool refill() {
    const std::size_t k = in_.read(buf_.data(), buf_.size());
    zs_.next_in = buf_.data();
    zs_.avail_in = uInt(k);
    return k > 0;
  }
  // After a member's end: the next member, or the end of the file (false).
  bool next_member() {
    member_ended_ = false;
    if (zs_.avail_in == 0 && !refill()) {
      done_ = true;
      return false;
    }
    if (zs_.avail_in < 2 && zs_.next_in[0] == 0x1f) {  // the magic split by a read: join it
      const std::uint8_t first = zs_.next_in[0];
      buf_[0] = first;
      const std::size_t k = in_.read(buf_.data() + 1, buf_.size() - 1);
      zs_.next_in = buf_.data();
      zs_.avail_in = uInt(k + 1);
    }
    if (zs_.avail_in < 2 || zs_.next_in[0] != 0x1f || zs_.next_in[1] != 0x8b) {
      throw IdxError(path_ + ": data after the end of the gzip stream that is not another gzip " +
                     "member (a damaged or appended-to file?)");
    }
    inflateReset(&zs_);
    return true;
  }

  RawSource& in_;
  std::string path_;
  std::vector<std::uint8_t> buf_;
  z_stream zs_{};
  bool member_ended_ = false, done_ = false;
};

struct Header {
  IdxType type = IdxType::kUint8;
  std::vector<std::uint32_t> dims;
  std::size_t bytes = 0;    // the header's own size
  std::size_t payload = 0;  // the data's size the dimensions declare
};

// The 4-byte prefix: checks the magic and type, returns the number of dimensions.
int parse_prefix(const std::uint8_t* b, std::size_t n, const std::string& name, IdxType* type) {
  if (n < 4) {
    throw IdxError(name + ": file is " + std::to_string(n) + " bytes, too short for an IDX header");
  }
  if (b[0] != 0 || b[1] != 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
    throw IdxError(name + ": wrong magic 0x" + hex +
                   " (an IDX file starts with two zero bytes); is it an IDX file?");
  }
  *type = IdxType(b[2]);
  element_size(*type, name);
  if (b[3] == 0) throw IdxError(name + ": IDX header declares 0 dimensions");
  return b[3];
}

// The dimensions (4 * ndims bytes after the prefix) and the size they declare, checked for
// overflow: a product past 2^64 would wrap into a small number and pass every size check.
void parse_dims(const std::uint8_t* p, int ndims, const std::string& name, Header& h) {
  h.bytes = 4 + 4 * std::size_t(ndims);
  std::uint64_t total = element_size(h.type, name);
  bool overflow = false;
  for (int i = 0; i < ndims; ++i) {
    h.dims.push_back(be32(p + 4 * i));
    overflow = overflow || __builtin_mul_overflow(total, std::uint64_t(h.dims.back()), &total);
  }
  if (overflow || total > std::uint64_t(std::numeric_limits<std::ptrdiff_t>::max()) - h.bytes) {
    throw IdxError(name + ": IDX dimensions " + dims_text(h.dims) +
                   " declare more data than any file can hold (their product overflows)");
  }
  h.payload = std::size_t(total);
}

std::string declared(const Header& h) {
  return "the header's dimensions " + dims_text(h.dims) + " declare " +
         std::to_string(h.payload / std::max<std::size_t>(1, element_size(h.type, ""))) +
         " elements (" + std::to_string(h.bytes + h.payload) + " bytes)";
}

Header read_header(Source& src, const std::string& name) {
  std::uint8_t prefix[4];
  std::size_t got = 0;
  src.read_exact(prefix, 4, &got);
  Header h;
  const int ndims = parse_prefix(prefix, got, name, &h.type);
  std::vector<std::uint8_t> dims(4 * std::size_t(ndims));
  if (!src.read_exact(dims.data(), dims.size(), &got)) {
    throw IdxError(name + ": truncated header: " + std::to_string(ndims) + " dimensions need " +
                   std::to_string(4 + dims.size()) + " bytes, file has " + std::to_string(4 + got));
  }
  parse_dims(dims.data(), ndims, name, h);
  return h;
}

// The payload, read in growing pieces so that a header that declares more than the stream holds
// costs no more memory than the stream gives.
std::vector<std::uint8_t> read_payload(Source& src, const Header& h, const std::string& name) {
  std::vector<std::uint8_t> data;
  std::size_t have = 0;
  while (have < h.payload) {
    const std::size_t next = std::min(h.payload, std::max(have * 2, std::size_t(1) << 20));
    data.resize(next);
    std::size_t got = 0;
    src.read_exact(data.data() + have, next - have, &got);
    have += got;
    if (have < next) {
      throw IdxError(name + ": truncated: " + declared(h) + ", file has " +
                     std::to_string(h.bytes + have) + " bytes");
    }
  }
  return data;
}

// Bytes after the declared data are an error (wrong dimensions); counted up to a bound.
void expect_end(Source& src, const Header& h, const std::string& name) {
  constexpr std::size_t kCount = std::size_t(1) << 20;
  std::vector<std::uint8_t> scratch(kChunk);
  std::size_t extra = 0;
  while (extra < kCount) {
    const std::size_t k = src.read(scratch.data(), scratch.size());
    if (k == 0) break;
    extra += k;
  }
  if (extra == 0) return;
  throw IdxError(name + ": " + (extra >= kCount ? "more than " : "") + std::to_string(extra) +
                 " bytes after the data the header declares (" + declared(h) +
                 "); wrong dimensions?");
}

// A regular file's size bounds what it can hold: raw, header plus data exactly; gzip, at most
// kMaxDeflateRatio times its size. Checked before the data is read or allocated.
void check_against_file(const Header& h, const struct stat& st, bool gzip,
                        const std::string& path) {
  if (!S_ISREG(st.st_mode)) return;
  const std::uint64_t size = std::uint64_t(st.st_size);
  const std::uint64_t want = std::uint64_t(h.bytes) + h.payload;
  if (!gzip && want > size) {
    throw IdxError(path + ": truncated: " + declared(h) + ", file has " + std::to_string(size) +
                   " bytes");
  }
  if (!gzip && want < size) {
    throw IdxError(path + ": " + std::to_string(size - want) +
                   " bytes after the data the header declares (" + declared(h) +
                   "); wrong dimensions?");
  }
  if (gzip && want > kMaxDeflateRatio * size + kChunk) {
    throw IdxError(path + ": " + declared(h) + ", more than a gzip file of " +
                   std::to_string(size) + " bytes can hold: a damaged header?");
  }
}

IdxArray read_stream(int fd, const struct stat& st, const std::string& path) {
  RawSource raw(fd, path);
  std::uint8_t magic[2];
  std::size_t got = 0;
  raw.read_exact(magic, 2, &got);
  const bool gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  raw.unread(magic, got);
  std::unique_ptr<GzipSource> gz;
  if (gzip) gz = std::make_unique<GzipSource>(raw, path);
  Source& src = gzip ? static_cast<Source&>(*gz) : raw;
  Header h = read_header(src, path);
  check_against_file(h, st, gzip, path);
  IdxArray a;
  a.type = h.type;
  a.data = read_payload(src, h, path);
  expect_end(src, h, path);
  a.dims = std::move(h.dims);
  return a;
}

}  // namespace

IdxArray parse_idx(const std::vector<std::uint8_t>& b, const std::string& name) {
  Header h;
  const int ndims = parse_prefix(b.data(), b.size(), name, &h.type);
  const std::size_t header = 4 + 4 * std::size_t(ndims);
  if (b.size() < header) {
    throw IdxError(name + ": truncated header: " + std::to_string(ndims) + " dimensions need " +
                   std::to_string(header) + " bytes, file has " + std::to_string(b.size()));
  }
  parse_dims(b.data() + 4, ndims, name, h);
  const std::size_t want = h.bytes + h.payload;
  if (b.size() < want) {
    throw IdxError(name + ": truncated: " + declared(h) + ", file has " + std::to_string(b.size()) +
                   " bytes");
  }
  if (b.size() > want) {
    throw IdxError(name + ": " + std::to_string(b.size() - want) +
                   " bytes after the data the header declares (" + declared(h) +
                   "); wrong dimensions?");
  }
  IdxArray a;
  a.type = h.type;
  a.dims = std::move(h.dims);
  a.data.assign(b.begin() + std::ptrdiff_t(h.bytes), b.end());
  return a;
}

IdxArray read_idx(const std::string& path) {
  const common::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw IdxError(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw IdxError(path + ": cannot stat (" + std::strerror(errno) + ")");
  }
  if (S_ISDIR(st.st_mode)) throw IdxError(path + ": is a directory, expected an IDX file");
  try {
    return read_stream(fd.get(), st, path);
  } catch (const std::bad_alloc&) {
    throw IdxError(path + ": out of memory holding the data its header declares");
  }
}

std::vector<std::uint8_t> encode_idx(const IdxArray& a) {
  std::vector<std::uint8_t> out = {0, 0, std::uint8_t(a.type), std::uint8_t(a.dims.size())};
  for (std::uint32_t d : a.dims) {
    out.push_back(std::uint8_t(d >> 24));
    out.push_back(std::uint8_t(d >> 16));
    out.push_back(std::uint8_t(d >> 8));
    out.push_back(std::uint8_t(d));
  }
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

}  // namespace gpurun::runtime

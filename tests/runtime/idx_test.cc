// idx_test.cc: the IDX reader on good files (raw and gzip) and on every broken kind the issue
// names: truncated (raw and gzip), wrong magic, wrong sizes; errors must name the file. And the
// hostile ones: dimensions whose product overflows, a gz bomb (read only as far as the header
// declares, memory bounded), gzip files of several members, bytes appended after the stream.
#include "gpurun/runtime/idx.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gpurun/runtime/dataset.h"

namespace gpurun::runtime {
namespace {

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpurun-idx-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::string write_raw(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return p;
  }
  std::string write_gz(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    const std::string p = dir_ + "/" + name;
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
    return p;
  }
  static IdxArray images(std::uint32_t n, std::uint32_t r, std::uint32_t c) {
    IdxArray a;
    a.type = IdxType::kUint8;
    a.dims = {n, r, c};
    a.data.resize(std::size_t(n) * r * c);
    for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = std::uint8_t(i * 7);
    return a;
  }
  static IdxArray labels(std::uint32_t n) {
    IdxArray a;
    a.dims = {n};
    for (std::uint32_t i = 0; i < n; ++i) a.data.push_back(std::uint8_t(i % 10));
    return a;
  }
  // Expects read_idx(path) to throw an IdxError whose message has the path and `what`.
  static void expect_error(const std::string& path, const std::string& what) {
    try {
      read_idx(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const IdxError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(path), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    }
  }
  std::string dir_;
};

// One gzip member holding `bytes` and then `zeros` zero bytes, deflated (fast) as it goes.
std::vector<std::uint8_t> gzip_member(const std::vector<std::uint8_t>& bytes,
                                      std::size_t zeros = 0) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<std::uint8_t> out, chunk(1 << 16);
  const std::vector<std::uint8_t> zero(std::size_t(1) << 20, 0);
  const auto feed = [&](const std::uint8_t* p, std::size_t n, int flush) {
    zs.next_in = const_cast<Bytef*>(p);
    zs.avail_in = uInt(n);
    do {
      zs.next_out = chunk.data();
      zs.avail_out = uInt(chunk.size());
      deflate(&zs, flush);
      out.insert(out.end(), chunk.data(), chunk.data() + (chunk.size() - zs.avail_out));
    } while (zs.avail_out == 0 || zs.avail_in > 0);
  };
  feed(bytes.data(), bytes.size(), Z_NO_FLUSH);
  for (std::size_t left = zeros; left > 0; left -= std::min(left, zero.size())) {
    feed(zero.data(), std::min(left, zero.size()), Z_NO_FLUSH);
  }
  feed(nullptr, 0, Z_FINISH);
  deflateEnd(&zs);
  return out;
}

std::vector<std::uint8_t> header_only(IdxType type, const std::vector<std::uint32_t>& dims) {
  IdxArray a;
  a.type = type;
  a.dims = dims;
  return encode_idx(a);
}

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST_F(IdxTest, ReadsRawAndGzipIdentically) {
  const auto bytes = encode_idx(images(3, 4, 5));
  const IdxArray a = read_idx(write_raw("a-idx3-ubyte", bytes));
  const IdxArray b = read_idx(write_gz("a-idx3-ubyte.gz", bytes));
  EXPECT_EQ(a.dims, (std::vector<std::uint32_t>{3, 4, 5}));
  EXPECT_EQ(a.type, IdxType::kUint8);
  EXPECT_EQ(a.data, images(3, 4, 5).data);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.dims, b.dims);
}

TEST_F(IdxTest, TruncatedRawFileNamesFileAndSizes) {
  auto bytes = encode_idx(images(3, 4, 5));
  bytes.resize(bytes.size() - 10);
  expect_error(write_raw("t-idx3-ubyte", bytes), "truncated");
}

TEST_F(IdxTest, TruncatedHeader) {
  auto bytes = encode_idx(images(3, 4, 5));
  bytes.resize(9);
  expect_error(write_raw("h-idx3-ubyte", bytes), "truncated header");
}

TEST_F(IdxTest, TruncatedGzipStream) {
  const std::string full = write_gz("full.gz", encode_idx(images(50, 28, 28)));
  std::ifstream in(full, std::ios::binary);
  std::vector<std::uint8_t> gz((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  expect_error(write_raw("cut-idx3-ubyte.gz", gz), "truncated gzip");
}

TEST_F(IdxTest, CorruptGzipStream) {
  const std::string full = write_gz("full.gz", encode_idx(images(50, 28, 28)));
  std::ifstream in(full, std::ios::binary);
  std::vector<std::uint8_t> gz((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  for (std::size_t i = 20; i < 60; ++i) gz[i] ^= 0xA5;
  expect_error(write_raw("bad-idx3-ubyte.gz", gz), "gzip");
}

TEST_F(IdxTest, WrongMagic) {
  auto bytes = encode_idx(images(2, 2, 2));
  bytes[0] = 0x50;  // "P", e.g. a PNG or an HTML error page saved under the name
  expect_error(write_raw("m-idx3-ubyte", bytes), "wrong magic");
}

TEST_F(IdxTest, UnknownElementType) {
  auto bytes = encode_idx(images(2, 2, 2));
  bytes[2] = 0x07;
  expect_error(write_raw("u-idx3-ubyte", bytes), "unknown IDX element type");
}

TEST_F(IdxTest, WrongSizesTrailingBytes) {
  auto bytes = encode_idx(images(2, 3, 3));
  bytes.push_back(1);
  bytes.push_back(2);
  expect_error(write_raw("s-idx3-ubyte", bytes), "2 bytes after the data");
}

TEST_F(IdxTest, EmptyFile) {
  expect_error(write_raw("e", {}), "too short");
}

TEST_F(IdxTest, MissingFile) {
  expect_error(dir_ + "/nope", "cannot open");
}

// 65536^4 = 2^64 wraps to 0 in 64 bits: the old reader took this 20-byte file for an empty
// array of 65536 x 65536 x 65536 x 65536, and a split with such dimensions ended in bad_alloc.
TEST_F(IdxTest, DimensionsWhoseProductOverflowsAreRefusedByName) {
  const auto bytes = header_only(IdxType::kUint8, {65536, 65536, 65536, 65536});
  const std::string raw = write_raw("overflow-idx3-ubyte", bytes);
  expect_error(raw, "65536 x 65536 x 65536 x 65536");
  expect_error(raw, "overflows");
  expect_error(write_raw("overflow.gz", gzip_member(bytes)), "overflows");
  // The element size counts too: 2^62 float64s are 2^65 bytes.
  expect_error(write_raw("overflow-f64", header_only(IdxType::kFloat64, {1u << 31, 1u << 31})),
               "overflows");
  // In memory as well.
  EXPECT_THROW(parse_idx(bytes, "mem"), IdxError);
}

// No overflow, but far more than the file holds: refused before anything is allocated.
TEST_F(IdxTest, DimensionsBeyondTheFileAreRefusedUnread) {
  auto bytes = header_only(IdxType::kUint8, {4000000000u, 28, 28});
  bytes.resize(bytes.size() + 100, 7);
  expect_error(write_raw("huge-idx3-ubyte", bytes), "4000000000 x 28 x 28");
  expect_error(write_raw("huge-idx3-ubyte.gz", gzip_member(bytes)), "more than a gzip file");
}

// 1,016 bytes of IDX, then 256 MiB of zeros in 1.1 MB of gzip. The old reader inflated all of
// it into memory before looking at the header (a larger bomb: bad_alloc, no file named).
TEST_F(IdxTest, GzipBombIsCutOffAtTheDeclaredSize) {
  const auto bomb = gzip_member(encode_idx(images(10, 10, 10)), std::size_t(256) << 20);
  const std::string path = write_raw("bomb-idx3-ubyte.gz", bomb);
  const long before = max_rss_kib();
  expect_error(path, "bytes after the data the header declares");
  EXPECT_LT(max_rss_kib() - before, 64 * 1024) << "the reader held more than 64 MiB";
}

// gzip -d reads every member of a file; so does the reader (the old one stopped after the
// first and called the file truncated).
TEST_F(IdxTest, ReadsEveryGzipMember) {
  const auto bytes = encode_idx(images(20, 28, 28));
  const std::size_t cut = bytes.size() / 3;
  auto gz = gzip_member({bytes.begin(), bytes.begin() + std::ptrdiff_t(cut)});
  const auto second = gzip_member({bytes.begin() + std::ptrdiff_t(cut), bytes.end()});
  gz.insert(gz.end(), second.begin(), second.end());
  const IdxArray a = read_idx(write_raw("two-members-idx3-ubyte.gz", gz));
  EXPECT_EQ(a.dims, (std::vector<std::uint32_t>{20, 28, 28}));
  EXPECT_EQ(a.data, images(20, 28, 28).data);
}

// A whole file followed by a second member, or by bytes that are no gzip member: the old reader
// returned the first member's array and ignored the rest without a word.
TEST_F(IdxTest, DataAfterTheDeclaredArrayIsRefused) {
  auto gz = gzip_member(encode_idx(images(2, 3, 3)));
  const auto one = gz;
  const auto extra = gzip_member({1, 2, 3, 4, 5});
  gz.insert(gz.end(), extra.begin(), extra.end());
  expect_error(write_raw("second-member.gz", gz), "5 bytes after the data the header declares");
  auto junk = one;
  for (char c : std::string("appended by mistake")) junk.push_back(std::uint8_t(c));
  expect_error(write_raw("junk.gz", junk), "not another gzip member");
}

TEST_F(IdxTest, DirectoryIsNotAnIdxFile) {
  expect_error(dir_, "is a directory");
}

TEST_F(IdxTest, SplitChecksCountsDimsAndLabels) {
  const auto im = write_raw("im", encode_idx(images(4, 2, 2)));
  EXPECT_EQ(load_split(im, write_raw("lb", encode_idx(labels(4))), 10).count, 4u);
  // Images and labels disagree on the count.
  try {
    load_split(im, write_raw("lb3", encode_idx(labels(3))), 10);
    ADD_FAILURE();
  } catch (const IdxError& e) {
    EXPECT_NE(std::string(e.what()).find("4 images"), std::string::npos) << e.what();
  }
  // Labels file given as images: wrong number of dimensions.
  EXPECT_THROW(load_split(write_raw("lb4", encode_idx(labels(4))), im, 10), IdxError);
  // A label >= classes.
  auto bad = labels(4);
  bad.data[2] = 10;
  try {
    load_split(im, write_raw("lbbad", encode_idx(bad)), 10);
    ADD_FAILURE();
  } catch (const IdxError& e) {
    EXPECT_NE(std::string(e.what()).find("position 2"), std::string::npos) << e.what();
  }
}

TEST_F(IdxTest, MissingDirectoryHintsAtFetchData) {
  try {
    load_mnist_dir(dir_ + "/absent");
    ADD_FAILURE();
  } catch (const IdxError& e) {
    EXPECT_NE(std::string(e.what()).find("fetch-data.sh"), std::string::npos) << e.what();
  }
}

TEST_F(IdxTest, GatherScalesToUnitInterval) {
  Split s;
  s.count = 2;
  s.rows = 1;
  s.cols = 2;
  s.pixels = {0, 255, 51, 102};
  s.labels = {3, 8};
  const std::int32_t idx[2] = {1, 0};
  float x[4];
  std::int32_t y[2];
  s.gather(idx, 2, x, y);
  EXPECT_FLOAT_EQ(x[0], 0.2f);
  EXPECT_FLOAT_EQ(x[1], 0.4f);
  EXPECT_FLOAT_EQ(x[3], 1.0f);
  EXPECT_EQ(y[0], 8);
  EXPECT_EQ(y[1], 3);
}

}  // namespace
}  // namespace gpurun::runtime

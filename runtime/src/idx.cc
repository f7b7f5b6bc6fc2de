// idx.cc: IDX parsing and gzip handling (zlib). The whole file is read into memory: the largest
// MNIST file is 47 MB, and reading once makes every size check exact.
#include "gpurun/runtime/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace gpurun::runtime {
namespace {

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

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IdxError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  if (in.bad()) throw IdxError(path + ": read error");
  return bytes;
}

std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& gz, const std::string& path) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) throw IdxError(path + ": zlib inflateInit failed");
  std::vector<std::uint8_t> out;
  out.reserve(gz.size() * 4);
  zs.next_in = const_cast<Bytef*>(gz.data());
  zs.avail_in = static_cast<uInt>(gz.size());
  std::uint8_t chunk[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = chunk;
    zs.avail_out = sizeof(chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string why = rc == Z_BUF_ERROR ? "truncated gzip stream (unexpected end of file)"
                                                : std::string("corrupt gzip data (") +
                                                      (zs.msg ? zs.msg : "zlib error") + ")";
      inflateEnd(&zs);
      throw IdxError(path + ": " + why);
    }
    out.insert(out.end(), chunk, chunk + (sizeof(chunk) - zs.avail_out));
    if (rc != Z_STREAM_END && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      throw IdxError(path + ": truncated gzip stream (unexpected end of file)");
    }
  }
  inflateEnd(&zs);
  return out;
}

}  // namespace

IdxArray parse_idx(const std::vector<std::uint8_t>& b, const std::string& name) {
  if (b.size() < 4) {
    throw IdxError(name + ": file is " + std::to_string(b.size()) +
                   " bytes, too short for an IDX header");
  }
  if (b[0] != 0 || b[1] != 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
    throw IdxError(name + ": wrong magic 0x" + hex +
                   " (an IDX file starts with two zero bytes); is it an IDX file?");
  }
  IdxArray a;
  a.type = IdxType(b[2]);
  const std::size_t esize = element_size(a.type, name);
  const int ndims = b[3];
  if (ndims == 0) throw IdxError(name + ": IDX header declares 0 dimensions");
  const std::size_t header = 4 + 4 * std::size_t(ndims);
  if (b.size() < header) {
    throw IdxError(name + ": truncated header: " + std::to_string(ndims) + " dimensions need " +
                   std::to_string(header) + " bytes, file has " + std::to_string(b.size()));
  }
  std::size_t count = 1;
  for (int i = 0; i < ndims; ++i) {
    const std::uint8_t* p = b.data() + 4 + 4 * i;
    const std::uint32_t d = (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) |
                            (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
    a.dims.push_back(d);
    count *= d;
  }
  const std::size_t want = header + count * esize;
  if (b.size() < want) {
    throw IdxError(name + ": truncated: header declares " + std::to_string(count) + " elements (" +
                   std::to_string(want) + " bytes), file has " + std::to_string(b.size()) +
                   " bytes");
  }
  if (b.size() > want) {
    throw IdxError(name + ": " + std::to_string(b.size() - want) +
                   " bytes after the data the header declares; wrong dimensions?");
  }
  a.data.assign(b.begin() + header, b.end());
  return a;
}

IdxArray read_idx(const std::string& path) {
  std::vector<std::uint8_t> bytes = read_file(path);
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) bytes = gunzip(bytes, path);
  return parse_idx(bytes, path);
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

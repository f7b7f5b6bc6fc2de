// idx.h: reader for the IDX format of MNIST and Fashion-MNIST (big-endian header: two zero bytes,
// a type code, the number of dimensions, then one u32 per dimension, then the data), raw or gzip.
// Every problem (missing file, bad gzip, wrong magic, truncated data, trailing bytes) throws
// IdxError whose message starts with the file's path and says what is wrong. Hostile files are
// bounded: dimensions whose product overflows, or that declare more than the file can hold
// (raw: exactly; gzip: 1032 times its size, deflate's limit), are refused unread, naming the
// dimensions; a gzip stream is inflated only as far as the header declares (a gz bomb costs
// at most 1 MiB more), all its members are read as gzip -d reads them, and anything after the
// declared data, or after the last member, is an error.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpurun::runtime {

class IdxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class IdxType : std::uint8_t {
  kUint8 = 0x08,
  kInt8 = 0x09,
  kInt16 = 0x0B,
  kInt32 = 0x0C,
  kFloat32 = 0x0D,
  kFloat64 = 0x0E,
};

struct IdxArray {
  IdxType type = IdxType::kUint8;
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;  // the payload as stored (big-endian for multi-byte types)
};

// Parses an IDX image from memory; `name` is used in error messages.
IdxArray parse_idx(const std::vector<std::uint8_t>& bytes, const std::string& name);
// Reads a file (or a pipe), gunzipping it when it starts with the gzip magic (whatever its name).
IdxArray read_idx(const std::string& path);
// Serialises an array (used by tests and tools that write IDX).
std::vector<std::uint8_t> encode_idx(const IdxArray& a);

}  // namespace gpurun::runtime

// json_fields.h: typed reads of a JSON object's fields, each checked (type, range) before use, for
// the JSON that gpuq reads from another process: a client's request (job/request.cc) and a job's
// supervisor spec (supervise/supervisor_spec.cc). A failure is a std::invalid_argument
// "<where> '<path>': expected <what>, got <value>", where `where` says whose field it is
// ("request field", "job spec /var/lib/gpuq/run/5.spec: field"). Header-light on purpose: the
// request fuzzer compiles it with request.cc alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpurun::queue::json_fields {

using json = nlohmann::json;

// An object, and how errors name its fields: `where` the document, `path` the way to it
// ("job.array." inside a request's job).
struct Obj {
  Obj(const json& j, std::string p = "", std::string w = "request field")  // NOLINT: implicit
      : o(j), path(std::move(p)), where(std::move(w)) {}
  const json& o;
  std::string path;
  std::string where;
  std::string name(const char* key) const { return path + key; }
};

[[noreturn]] void bad_field(const std::string& where, const std::string& name,
                            const std::string& expected, const json& got);
[[noreturn]] inline void bad_field(const Obj& o, const std::string& name,
                                   const std::string& expected, const json& got) {
  bad_field(o.where, name, expected, got);
}

const json* field(const Obj& o, const char* key);  // nullptr when absent or null
// A present field, or an error saying that it is missing and what it should be.
const json& required(const Obj& o, const char* key, const std::string& expected);

// An integer in [lo, hi], compared as the JSON number it is (signed or unsigned), never cast first.
int64_t int_value(const Obj& o, const json& v, const std::string& name, int64_t lo, int64_t hi);
int64_t get_int(const Obj& o, const char* key, int64_t lo, int64_t hi, int64_t fallback);
size_t get_count(const Obj& o, const char* key, size_t hi, size_t fallback);
bool get_bool(const Obj& o, const char* key, bool fallback);
std::string get_string(const Obj& o, const char* key, const std::string& fallback);

// Bytes that need not be UTF-8: a job's script, its arguments, its environment's values (sbatch
// passes whatever bytes they hold). JSON text is UTF-8, so bytes that are not go as
// {"latin1": TEXT}, each byte as the character of that code (ISO-8859-1), and come back byte
// for byte; UTF-8 goes as a plain string. get_bytes, get_bytes_list and get_bytes_map read both.
json bytes_json(const std::string& bytes);
json bytes_json(const std::vector<std::string>& list);
json bytes_json(const std::map<std::string, std::string>& map);
std::string get_bytes(const Obj& o, const char* key, const std::string& fallback);
std::vector<std::string> get_bytes_list(const Obj& o, const char* key);           // absent: empty
std::map<std::string, std::string> get_bytes_map(const Obj& o, const char* key);  // absent: empty
std::vector<std::string> get_strings(const Obj& o, const char* key);              // absent: empty
// The offset of the first byte of s that is not valid UTF-8 (RFC 3629, as Boost.Locale decodes
// it: no overlong forms, surrogates or code points past U+10FFFF), or npos.
size_t invalid_utf8_at(const std::string& s);
const json& get_object(const Obj& o, const char* key, const std::string& expected);

// The keys `o` may have: anything else is refused by name, so a field the reader does not know is
// never silently dropped (a newer writer's field, a typo).
void only_keys(const Obj& o, std::initializer_list<const char*> keys);

}  // namespace gpurun::queue::json_fields

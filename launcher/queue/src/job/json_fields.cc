// Checked reads of JSON fields (json_fields.h).
#include "job/json_fields.h"

#include <fmt/format.h>
#include <iconv.h>

#include <optional>
#include <stdexcept>

namespace gpurun::queue::json_fields {

void bad_field(const std::string& where, const std::string& name, const std::string& expected,
               const json& got) {
  std::string shown = got.dump(-1, ' ', false, json::error_handler_t::replace);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  throw std::invalid_argument(
      fmt::format("{} '{}': expected {}, got {}", where, name, expected, shown));
}

const json* field(const Obj& o, const char* key) {
  auto it = o.o.find(key);
  return it == o.o.end() || it->is_null() ? nullptr : &*it;
}

const json& required(const Obj& o, const char* key, const std::string& expected) {
  const json* v = field(o, key);
  if (!v) bad_field(o, o.name(key), expected, json());
  return *v;
}

int64_t int_value(const Obj& o, const json& v, const std::string& name, int64_t lo, int64_t hi) {
  const std::string want = fmt::format("an integer from {} to {}", lo, hi);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      bad_field(o, name, want, v);
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) bad_field(o, name, want, v);
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) bad_field(o, name, want, v);
  return i;
}

int64_t get_int(const Obj& o, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  const json* v = field(o, key);
  return v ? int_value(o, *v, o.name(key), lo, hi) : fallback;
}

size_t get_count(const Obj& o, const char* key, size_t hi, size_t fallback) {
  return static_cast<size_t>(
      get_int(o, key, 0, static_cast<int64_t>(hi), static_cast<int64_t>(fallback)));
}

bool get_bool(const Obj& o, const char* key, bool fallback) {
  const json* v = field(o, key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad_field(o, o.name(key), "true or false", *v);
  return v->get<bool>();
}

std::string get_string(const Obj& o, const char* key, const std::string& fallback) {
  const json* v = field(o, key);
  if (!v) return fallback;
  if (!v->is_string()) bad_field(o, o.name(key), "a string", *v);
  return v->get<std::string>();
}

namespace {

// `in` converted by glibc's iconv from the encoding `from` to `to`; nullopt where it has a byte
// sequence `from` does not allow or a character `to` cannot hold.
std::optional<std::string> convert(const std::string& in, const char* to, const char* from) {
  iconv_t cd = iconv_open(to, from);
  if (cd == reinterpret_cast<iconv_t>(-1))
    throw std::runtime_error(fmt::format("iconv cannot convert {} to {}", from, to));
  std::string src = in, out(2 * in.size() + 4, '\0');
  char *ip = src.data(), *op = out.data();
  size_t il = src.size(), ol = out.size();
  const bool ok = iconv(cd, &ip, &il, &op, &ol) != static_cast<size_t>(-1);
  iconv_close(cd);
  if (!ok) return std::nullopt;
  out.resize(out.size() - ol);
  return out;
}

// What a bytes_json value must be, as an error says it.
const char* const kBytesExpected = "a string or {\"latin1\": TEXT} (characters up to U+00FF)";

// The bytes a bytes_json value stands for; nullopt when it is neither form.
std::optional<std::string> bytes_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_object() || v.size() != 1 || !v.contains("latin1") || !v["latin1"].is_string())
    return std::nullopt;
  return convert(v["latin1"].get<std::string>(), "LATIN1", "UTF-8");
}

}  // namespace

size_t invalid_utf8_at(const std::string& s) {
  iconv_t cd = iconv_open("UTF-8", "UTF-8");
  if (cd == reinterpret_cast<iconv_t>(-1)) return std::string::npos;  // cannot tell: let it pass
  std::string in = s, out(4 * s.size() + 4, '\0');
  char *ip = in.data(), *op = out.data();
  size_t il = in.size(), ol = out.size();
  size_t at = std::string::npos;
  if (iconv(cd, &ip, &il, &op, &ol) == static_cast<size_t>(-1))
    at = static_cast<size_t>(ip - in.data());
  iconv_close(cd);
  return at;
}

json bytes_json(const std::string& bytes) {
  if (invalid_utf8_at(bytes) == std::string::npos) return bytes;
  return {{"latin1", *convert(bytes, "UTF-8", "LATIN1")}};  // every byte is a Latin-1 character
}

json bytes_json(const std::vector<std::string>& list) {
  json out = json::array();
  for (const auto& s : list) out.push_back(bytes_json(s));
  return out;
}

json bytes_json(const std::map<std::string, std::string>& map) {
  json out = json::object();
  for (const auto& [k, v] : map) out[k] = bytes_json(v);
  return out;
}

std::string get_bytes(const Obj& o, const char* key, const std::string& fallback) {
  const json* v = field(o, key);
  if (!v) return fallback;
  std::optional<std::string> bytes = bytes_of(*v);
  if (!bytes) bad_field(o, o.name(key), kBytesExpected, *v);
  return *bytes;
}

std::vector<std::string> get_strings(const Obj& o, const char* key) {
  std::vector<std::string> out;
  const json* v = field(o, key);
  if (!v) return out;
  if (!v->is_array()) bad_field(o, o.name(key), "a list of strings", *v);
  for (const auto& s : *v) {
    if (!s.is_string()) bad_field(o, o.name(key), "a list of strings", s);
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::vector<std::string> get_bytes_list(const Obj& o, const char* key) {
  std::vector<std::string> out;
  const json* v = field(o, key);
  if (!v) return out;
  if (!v->is_array()) bad_field(o, o.name(key), "a list of strings", *v);
  for (const auto& s : *v) {
    std::optional<std::string> bytes = bytes_of(s);
    if (!bytes) bad_field(o, o.name(key), fmt::format("a list, each {}", kBytesExpected), s);
    out.push_back(std::move(*bytes));
  }
  return out;
}

std::map<std::string, std::string> get_bytes_map(const Obj& o, const char* key) {
  std::map<std::string, std::string> out;
  const json* v = field(o, key);
  if (!v) return out;
  if (!v->is_object()) bad_field(o, o.name(key), "an object of strings", *v);
  for (const auto& [k, s] : v->items()) {
    std::optional<std::string> bytes = bytes_of(s);
    if (!bytes) bad_field(o, o.name(key), fmt::format("{} for {}", kBytesExpected, k), s);
    out[k] = std::move(*bytes);
  }
  return out;
}

const json& get_object(const Obj& o, const char* key, const std::string& expected) {
  const json* v = field(o, key);
  if (!v || !v->is_object()) bad_field(o, o.name(key), expected, v ? *v : json());
  return *v;
}

void only_keys(const Obj& o, std::initializer_list<const char*> keys) {
  for (const auto& item : o.o.items()) {
    bool known = false;
    for (const char* k : keys) known = known || item.key() == k;
    if (known) continue;
    std::string list;
    for (const char* k : keys) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
    bad_field(o, o.path + item.key(), fmt::format("no such field (known: {})", list),
              json(item.key()));
  }
}

}  // namespace gpurun::queue::json_fields

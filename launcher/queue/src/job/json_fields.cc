// Checked reads of JSON fields (json_fields.h).
#include "job/json_fields.h"

#include <fmt/format.h>

#include <boost/locale/utf.hpp>
#include <iterator>
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

using Utf8 = boost::locale::utf::utf_traits<char>;

// Each byte as the character of that code (ISO-8859-1 to UTF-8).
std::string latin1_to_utf8(const std::string& bytes) {
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char b : bytes) Utf8::encode(b, std::back_inserter(out));
  return out;
}

// The bytes latin1_to_utf8 made `text` from; nullopt when it is not UTF-8 or has a character
// past U+00FF.
std::optional<std::string> utf8_to_latin1(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (auto it = text.begin(); it != text.end();) {
    const boost::locale::utf::code_point c = Utf8::decode(it, text.end());
    if (c == boost::locale::utf::illegal || c == boost::locale::utf::incomplete || c > 0xFF)
      return std::nullopt;
    out.push_back(static_cast<char>(c));
  }
  return out;
}

// What a bytes_json value must be, as an error says it.
const char* const kBytesExpected = "a string or {\"latin1\": TEXT} (characters up to U+00FF)";

// The bytes a bytes_json value stands for; nullopt when it is neither form.
std::optional<std::string> bytes_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_object() || v.size() != 1 || !v.contains("latin1") || !v["latin1"].is_string())
    return std::nullopt;
  return utf8_to_latin1(v["latin1"].get<std::string>());
}

}  // namespace

size_t invalid_utf8_at(const std::string& s) {
  for (auto it = s.begin(); it != s.end();) {
    const auto at = it;
    const boost::locale::utf::code_point c = Utf8::decode(it, s.end());
    if (c == boost::locale::utf::illegal || c == boost::locale::utf::incomplete)
      return static_cast<size_t>(at - s.begin());
  }
  return std::string::npos;
}

json bytes_json(const std::string& bytes) {
  if (invalid_utf8_at(bytes) == std::string::npos) return bytes;
  return {{"latin1", latin1_to_utf8(bytes)}};
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

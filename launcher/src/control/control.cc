// control.cc: encoding and parsing of the control protocol (control.h), generic over the message
// structs: each field type knows how to write and read itself, each message lists its fields.
#include "control/control.h"

#include <fmt/format.h>

#include <charconv>
#include <type_traits>

#include "gpurun/common/posix.h"
#include "gpurun/common/strings.h"

namespace gpurun::launcher::control {
namespace {

// What a word escapes besides '%': space and control characters; a Text only CR and LF.
bool word_byte(unsigned char u) {
  return u <= 0x20 || u == 0x7f;
}
bool text_byte(unsigned char u) {
  return u == '\n' || u == '\r';
}

// --- fields out ----------------------------------------------------------------------------

void put(std::string& out, const std::string& s) {
  out += ' ';
  out += escape_word(s);
}
void put(std::string& out, const Text& t) {
  out += ' ';
  out += escape_text(t.value);
}
void put(std::string& out, double v) {
  out += fmt::format(" {}", v);
}
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
void put(std::string& out, I v) {
  out += fmt::format(" {}", v);
}

// --- fields in: each takes its text from the front of `rest` -------------------------------

std::optional<std::string_view> next_word(std::string_view& rest) {
  if (rest.empty() || rest[0] != ' ') return std::nullopt;
  rest.remove_prefix(1);
  std::size_t end = rest.find(' ');
  std::string_view w = rest.substr(0, end);
  rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  if (w.empty()) return std::nullopt;
  return w;
}

bool take(std::string_view& rest, std::string& out) {
  auto w = next_word(rest);
  if (!w) return false;
  auto v = unescape(*w);
  if (!v) return false;
  out = std::move(*v);
  return true;
}
bool take(std::string_view& rest, Text& out) {
  if (rest.empty() || rest[0] != ' ') return false;
  auto v = unescape(rest.substr(1));
  if (!v) return false;
  out.value = std::move(*v);
  rest = {};
  return true;
}
template <class N, std::enable_if_t<std::is_arithmetic_v<N>, int> = 0>
bool take(std::string_view& rest, N& out) {
  auto w = next_word(rest);
  if (!w) return false;
  if constexpr (std::is_floating_point_v<N>) {
    // from_chars for double is not in every libstdc++ this builds with; strtod needs a NUL.
    std::string s(*w);
    char* end = nullptr;
    out = static_cast<N>(std::strtod(s.c_str(), &end));
    return end == s.c_str() + s.size();
  } else {
    auto r = std::from_chars(w->data(), w->data() + w->size(), out);
    return r.ec == std::errc() && r.ptr == w->data() + w->size();
  }
}

// --- messages ------------------------------------------------------------------------------

template <class M>
std::string encode_one(const M& m) {
  std::string out(M::kTag);
  std::apply([&](const auto&... f) { (put(out, f), ...); }, M::fields(m));
  out += '\n';
  return out;
}

// A message whose fields parse may still be impossible: a signal number outside 1-64 (it would
// reach kill() or 128 + signal), an exit code outside 0-255. Such a line is not one of ours.
template <class M>
bool valid(const M&) {
  return true;
}
bool valid(const Signal& m) {
  return common::is_signal_number(m.signal);
}
bool valid(const Exit& m) {
  return (m.signal == 0 || common::is_signal_number(m.signal)) && m.code >= 0 && m.code <= 255;
}

template <class M, class Variant>
bool parse_one(std::string_view tag, std::string_view rest, std::optional<Variant>& out) {
  if (tag != M::kTag) return false;
  M m;
  bool ok = true;
  std::apply([&](auto&... f) { ((ok = ok && take(rest, f)), ...); }, M::fields(m));
  if (ok && valid(m)) out = std::move(m);
  return true;  // the tag matched: no other alternative can
}

template <class... Ms>
std::optional<std::variant<Ms...>> parse_variant(std::string_view line, std::variant<Ms...>*) {
  std::string_view tag = line.substr(0, line.find(' '));
  std::string_view rest = line.substr(tag.size());
  std::optional<std::variant<Ms...>> out;
  (parse_one<Ms>(tag, rest, out) || ...);
  return out;
}

}  // namespace

std::string escape_word(std::string_view s) {
  return s.empty() ? "%" : common::percent_encode(s, word_byte);
}

std::string escape_text(std::string_view s) {
  return common::percent_encode(s, text_byte);
}

std::optional<std::string> unescape(std::string_view s) {
  if (s == "%") return std::string();
  return common::percent_decode(s);
}

std::string frame(int rank, std::string_view line) {
  std::string out = std::to_string(rank);
  out += ' ';
  out += line;
  return out;
}

std::optional<Frame> parse_frame(std::string_view line) {
  std::size_t sp = line.find(' ');
  if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size()) return std::nullopt;
  Frame f;
  f.body = line.substr(sp + 1);
  std::string_view head = line.substr(0, sp);
  auto r = std::from_chars(head.data(), head.data() + head.size(), f.rank);
  if (r.ec != std::errc() || r.ptr != head.data() + head.size() || f.rank < 0) return std::nullopt;
  return f;
}

std::string relay_socket_name(std::string_view token, std::string_view host) {
  // Abstract (a leading NUL, spelled '@' here and turned into NUL by the binder): nothing to
  // remove afterwards, and gone with the relay. The host keeps apart the simulated "nodes" of
  // one machine (a local Slurm cluster's node daemons). Bounded by sun_path's 108 bytes.
  std::string name = fmt::format("@gpurun-relay-{}-{}", token, escape_word(host));
  return name.substr(0, 100);
}

std::string encode(const ToSupervisor& m) {
  return std::visit([](const auto& x) { return encode_one(x); }, m);
}

std::string encode(const ToWrapper& m) {
  return std::visit([](const auto& x) { return encode_one(x); }, m);
}

std::optional<ToSupervisor> parse_to_supervisor(std::string_view line) {
  return parse_variant(line, static_cast<ToSupervisor*>(nullptr));
}

std::optional<ToWrapper> parse_to_wrapper(std::string_view line) {
  return parse_variant(line, static_cast<ToWrapper*>(nullptr));
}

}  // namespace gpurun::launcher::control

// terminal.cc: see terminal.h.
#include "gpurun/common/terminal.h"

#include <cstdio>

namespace gpurun::common {
namespace {

void put_hex(std::string& out, unsigned char u) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", u);
  out += buf;
}

void put_control(std::string& out, char c) {
  switch (c) {
    case '\x1b':
      out += "\\e";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\0':
      out += "\\0";
      break;
    default:
      put_hex(out, static_cast<unsigned char>(c));
  }
}

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong form, surrogate or
// code point past U+10FFFF) that encodes no C1 control (U+0080 to U+009F, which 8-bit terminals
// obey as ESC sequences), or 0.
std::size_t printable_utf8(std::string_view s, std::size_t i) {
  const auto u = static_cast<unsigned char>(s[i]);
  const std::size_t n = u >= 0xf0 && u <= 0xf4 ? 4 : u >= 0xe0 ? 3 : u >= 0xc2 && u < 0xe0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  const auto second = static_cast<unsigned char>(s[i + 1]);
  if ((u == 0xe0 && second < 0xa0) || (u == 0xed && second > 0x9f) ||  // overlong, surrogate
      (u == 0xf0 && second < 0x90) || (u == 0xf4 && second > 0x8f))    // overlong, > U+10FFFF
    return 0;
  if (u == 0xc2 && second < 0xa0) return 0;  // C1
  return n;
}

// The code point of the 2- to 4-byte UTF-8 sequence at s[i] (well-formed, n bytes long).
char32_t code_point(std::string_view s, std::size_t i, std::size_t n) {
  static constexpr unsigned char kLead[] = {0, 0, 0x1f, 0x0f, 0x07};
  char32_t c = static_cast<unsigned char>(s[i]) & kLead[n];
  for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return c;
}

// Unicode's bidirectional formatting characters (ALM, LRM, RLM, LRE..RLO, LRI..PDI): they reorder
// how the text around them is shown ("Trojan Source", CVE-2021-42574), so a name could show one
// thing on the screen and hold another.
bool bidi_control(char32_t c) {
  return c == 0x061c || c == 0x200e || c == 0x200f || (c >= 0x202a && c <= 0x202e) ||
         (c >= 0x2066 && c <= 0x2069);
}

std::string escape(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 0x20 && u < 0x7f) || (keep_newlines && c == '\n')) {
      out += c;
      ++i;
    } else if (u < 0x80) {
      put_control(out, c);
      ++i;
    } else if (std::size_t n = printable_utf8(s, i)) {
      if (const char32_t cp = code_point(s, i, n); bidi_control(cp)) {
        char buf[12];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
        out += buf;
      } else {
        out.append(s.substr(i, n));
      }
      i += n;
    } else {
      put_hex(out, u);  // not UTF-8, or a C1 control
      ++i;
    }
  }
  return out;
}

}  // namespace

std::string escape_control(std::string_view s) {
  return escape(s, false);
}

std::string escape_control_keep_lines(std::string_view s) {
  return escape(s, true);
}

}  // namespace gpurun::common

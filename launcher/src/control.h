// control.h: the control protocol between gpurun (the supervisor) and each rank's wrapper
// (`gpurun _rank`), in one place for both ends.
//
// One TCP connection per rank. A message is one line: its tag, then its fields, each after one
// space. Numbers are decimal. A std::string field is one word: space, '%' and control characters
// are %XX-escaped, and the empty string is "%". A Text field (always last) runs to the end of the
// line with only '%', CR and LF escaped, so ordinary text stays readable. A receiver ignores
// fields after the ones it knows (a newer peer may append some) and returns nothing for a line
// whose tag it does not know or whose fields do not parse.
//
// Adding a message: declare a struct with a unique kTag and a fields() that ties its members in
// wire order, add it to ToSupervisor or ToWrapper, and handle it where that variant is visited
// (std::visit makes a missing handler a compile error).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>

namespace gpurun::launcher::control {

// A field that runs to the end of the line (see above).
struct Text {
  std::string value;
};

// --- wrapper -> gpurun ---------------------------------------------------------------------

// First message on a connection; `token` proves the wrapper belongs to this launch.
struct Hello {
  static constexpr std::string_view kTag = "HELLO";
  std::string token;
  int rank = -1;
  std::string host;
  std::int64_t pid = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.token, s.rank, s.host, s.pid);
  }
};

// The program ended: exit code, or the signal that killed it, after `seconds`.
struct Exit {
  static constexpr std::string_view kTag = "EXIT";
  int rank = -1;
  int code = 0;
  int signal = 0;
  double seconds = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.rank, s.code, s.signal, s.seconds);
  }
};

// --- gpurun -> wrapper ---------------------------------------------------------------------

// Stop the program: TERM to its process group, KILL after a grace.
struct Stop {
  static constexpr std::string_view kTag = "STOP";
  template <class S>
  static auto fields(S&) {
    return std::tie();
  }
};

// Forward a signal to the program.
struct Signal {
  static constexpr std::string_view kTag = "SIG";
  int signal = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.signal);
  }
};

using ToSupervisor = std::variant<Hello, Exit>;
using ToWrapper = std::variant<Stop, Signal>;

// One line, '\n' included.
std::string encode(const ToSupervisor& m);
std::string encode(const ToWrapper& m);
// A line without its '\n'; nullopt for an unknown tag or fields that do not parse.
std::optional<ToSupervisor> parse_to_supervisor(std::string_view line);
std::optional<ToWrapper> parse_to_wrapper(std::string_view line);

// The escaping of a std::string field and of a Text field (exposed for tests).
std::string escape_word(std::string_view s);
std::string escape_text(std::string_view s);
std::optional<std::string> unescape(std::string_view s);

}  // namespace gpurun::launcher::control

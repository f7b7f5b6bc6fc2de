// error.h: the launcher's one error channel. Library code throws gpurun::launcher::Error with a
// message that names the input at fault (variable, file, option) and, where the cause is known,
// a hint; only main() turns it into an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace gpurun::launcher {

// what() is one line; `detail` (may be empty) holds lines shown under it, such as a caret under
// the offending character. main() escapes control characters in both before printing them.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string detail = "")
      : std::runtime_error(what), detail_(std::move(detail)) {}
  const std::string& detail() const { return detail_; }

 private:
  std::string detail_;
};

// A hostlist or tasks-per-node expression that does not parse. `position` is the byte offset of
// the offending character in `input`, so a caller can point at it.
class HostlistError : public Error {
 public:
  HostlistError(std::string input, std::size_t position, const std::string& reason);
  const std::string& input() const { return input_; }
  std::size_t position() const { return position_; }
  const std::string& reason() const { return reason_; }
  // Two lines: the expression (around the offending character), and a caret under it; also
  // detail().
  std::string pointer() const;

 private:
  std::string input_;
  std::size_t position_;
  std::string reason_;
};

}  // namespace gpurun::launcher

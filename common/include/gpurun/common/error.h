// error.h: the one error channel of gpurun's libraries. Library code throws gpurun::common::Error
// (gpurun::launcher::Error is the same class) with a message that names the input at fault
// (variable, file, option, tool) and, where the cause is known, a hint; only a program's main()
// turns it into an exit code.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace gpurun::common {

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

}  // namespace gpurun::common

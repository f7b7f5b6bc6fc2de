// error.h: the launcher's errors: common::Error (gpurun/common/error.h), and HostlistError, which
// points at the offending character of a hostlist expression.
#pragma once

#include <string>

#include "gpurun/common/error.h"

namespace gpurun::launcher {

using common::Error;

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

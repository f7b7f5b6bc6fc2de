// version.cc: the --version line, from the values the build generated (version_info.cc).
#include "gpurun_version.h"

namespace gpurun::common {

std::string version_line(const std::string& program) {
  std::string line = program + " " + project_version();
  if (*git_describe() != '\0') line += std::string(" (git ") + git_describe() + ")";
  return line;
}

}  // namespace gpurun::common

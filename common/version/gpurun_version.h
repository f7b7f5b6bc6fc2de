// gpurun_version.h: what `--version` prints in gpurun, gpuq and the training examples. The values
// come from CMake's project(VERSION) and `git describe` of the source tree, written at build time
// by cmake/gpurunVersionGen.cmake (one place); private to the programs, never installed.
#pragma once

#include <string>

namespace gpurun::common {

// The project's version, e.g. "0.1.0".
const char* project_version();

// `git describe --always --dirty` of the checkout the build came from, e.g. "7847c6f-dirty";
// empty when it was built outside a checkout (a source tarball) or without git.
const char* git_describe();

// "PROGRAM 0.1.0 (git 7847c6f)", or "PROGRAM 0.1.0" outside a checkout.
std::string version_line(const std::string& program);

}  // namespace gpurun::common

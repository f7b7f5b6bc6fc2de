// Small helpers shared by the #SBATCH parsers (sbatch.cc, sbatch_values.cc): every failure is a
// std::invalid_argument whose message names the offending text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpurun/common/strings.h"

namespace gpurun::queue::parse_util {

[[noreturn]] void bad(const std::string& what);
bool all_digits(const std::string& s);
// Non-negative integer no larger than `max`; `what` names the input in errors.
int64_t to_int(const std::string& s, const std::string& what, int64_t max);
using common::split;  // every field, empty ones kept

}  // namespace gpurun::queue::parse_util

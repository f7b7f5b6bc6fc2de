// Fuzz target for the #SBATCH parser: any input must either parse or throw std::invalid_argument,
// never crash, hang or throw anything else. Built as a libFuzzer target when the compiler supports
// -fsanitize=fuzzer; otherwise (CI) fuzz_driver.cc feeds it a corpus and random mutations.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpurun/queue/sbatch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto r = gpurun::queue::parse_sbatch_script(text);
    if (r.output) {
      gpurun::queue::PatternVars v{1, 0, -1, "n", "u", "h"};
      gpurun::queue::expand_output_pattern(*r.output, v);
    }
  } catch (const std::invalid_argument&) {
  }
  try {
    gpurun::queue::parse_time_limit(text);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

extern "C" const char* FuzzAlphabet() {
  return "#SBATCH-=:%@,?_ \t\n\"'0123456789gpuJtoeadBUSR1\\\xff";
}

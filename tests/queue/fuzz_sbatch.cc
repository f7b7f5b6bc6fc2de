// Fuzz target for the #SBATCH parser: any input must either parse or throw std::invalid_argument,
// never crash, hang or throw anything else; and what parses must pass the daemon's decoder. Built
// as a libFuzzer target when the compiler supports -fsanitize=fuzzer; otherwise (CI) fuzz_driver.cc
// feeds it a corpus and random mutations.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "gpurun/queue/sbatch.h"
#include "job/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::optional<gpurun::queue::JobRequest> parsed;
  try {
    parsed = gpurun::queue::parse_sbatch_script(text);
    if (parsed->output) {
      gpurun::queue::PatternVars v{1, 0, -1, "n", "u", "h"};
      gpurun::queue::expand_output_pattern(*parsed->output, v);
    }
  } catch (const std::invalid_argument&) {
  }
  // Whatever the client's parser makes of a script, the daemon's decoder takes as it is: the two
  // agree on every bound (job.h), so a script that parses is never refused as a hostile request.
  if (parsed) {
    gpurun::queue::SubmitRequest s;
    s.script = "#!/bin/sh\n";
    s.job = *parsed;
    try {
      // Replaced: the client refuses #SBATCH lines that are not UTF-8 before it sends anything.
      gpurun::queue::decode_request(gpurun::queue::encode_submit(s).dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace));
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "parsed but refused by the decoder: %s\n", e.what());
      std::abort();
    }
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

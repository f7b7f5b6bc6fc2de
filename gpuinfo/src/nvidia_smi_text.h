// nvidia_smi_text.h: what every reader of nvidia-smi's CSV needs (the sampler, its parsers, the
// health query): trimming and splitting lines, running the tool under the config's timeout, and
// telling an answer with no GPU row that the driver explains from one it does not. Private to
// gpuinfo.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gpurun/common/run_capture.h"
#include "gpurun/gpuinfo/gpu_sampler.h"

namespace gpurun::gpuinfo::smi {

std::string_view trim(std::string_view s);  // spaces, tabs, a trailing CR
std::vector<std::string_view> split(std::string_view s, char sep);  // each field trimmed
std::string first_line(const std::string& text);                    // at most 200 bytes

// Calls f on each non-empty line of text, trimmed.
template <class F>
void for_each_line(std::string_view text, F f) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty()) f(line);
  }
}

// Runs cfg.nvidia_smi ARGS, killed after cfg.timeout_ms; throws Error when cfg.cancel_fd turns
// readable (the owner is stopping). A timeout is the caller's to judge.
common::Captured run(const SamplerConfig& cfg, std::vector<std::string> args);

// A --query-gpu answer: throws Error naming the tool when it timed out, or when it has no GPU row
// and the driver did not say why ("No devices were found", a GPU's lost device handle): such an
// nvidia-smi does not speak the query (too old, or not nvidia-smi at all).
void expect_gpu_rows(const SamplerConfig& cfg, const common::Captured& c, bool any_rows,
                     const std::vector<std::string>& problems);

}  // namespace gpurun::gpuinfo::smi

// nvidia_smi_text.cc: see nvidia_smi_text.h.
#include "nvidia_smi_text.h"

#include <fmt/format.h>

#include "gpurun/common/error.h"

namespace gpurun::gpuinfo::smi {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    size_t at = s.find(sep);
    out.push_back(trim(s.substr(0, at)));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 200 ? line.substr(0, 200) : line;
}

common::Captured run(const SamplerConfig& cfg, std::vector<std::string> args) {
  args.insert(args.begin(), cfg.nvidia_smi);
  common::Captured c =
      common::run_capture(args, cfg.timeout_ms, common::kCaptureMaxBytes, cfg.cancel_fd);
  if (c.cancelled)
    throw common::Error(fmt::format("{} stopped: the sampler is ending", cfg.nvidia_smi));
  return c;
}

void expect_gpu_rows(const SamplerConfig& cfg, const common::Captured& c, bool any_rows,
                     const std::vector<std::string>& problems) {
  if (c.timed_out)
    throw common::Error(
        fmt::format("{} did not answer within {} ms (killed)", cfg.nvidia_smi, cfg.timeout_ms));
  bool explained = c.output.find("No devices were found") != std::string::npos;
  for (const auto& p : problems) explained = explained || p.find("device handle") != std::string::npos;
  if (!any_rows && !explained)
    throw common::Error(fmt::format("{} --query-gpu printed no GPU (exit {}): {}", cfg.nvidia_smi,
                                    c.exit_code ? std::to_string(*c.exit_code) : "unknown",
                                    c.output.empty() ? "nothing" : first_line(c.output)));
}

}  // namespace gpurun::gpuinfo::smi

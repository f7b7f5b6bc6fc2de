// Values of sbatch options: time limits, signals, dependencies, arrays, GPU counts and output
// file patterns (see sbatch.h), plus the helpers of parse_util.h.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <set>
#include <stdexcept>

#include "gpurun/common/posix.h"
#include "gpurun/common/terminal.h"
#include "gpurun/queue/sbatch.h"
#include "job/parse_util.h"

namespace gpurun::queue {
namespace parse_util {

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument(what);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

int64_t to_int(const std::string& s, const std::string& what, int64_t max) {
  if (!all_digits(s) || s.size() > 12)
    bad(fmt::format("{}: '{}' is not a number (expected an integer from 0 to {})", what, s, max));
  int64_t v = std::stoll(s);
  if (v > max) bad(fmt::format("{}: {} is larger than {}", what, v, max));
  return v;
}

}  // namespace parse_util

using parse_util::all_digits;
using parse_util::bad;
using parse_util::split;
using parse_util::to_int;

int64_t parse_time_limit(const std::string& text) {
  std::string upper = text;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (text == "0" || upper == "UNLIMITED" || upper == "INFINITE") return 0;
  const std::string what = fmt::format("time limit '{}'", text);
  if (text.empty() || text.find_first_not_of("0123456789:-") != std::string::npos ||
      text[0] == '-' || text.find('-') != text.rfind('-'))
    bad(what + ": expected M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED");
  int64_t days = 0;
  std::string rest = text;
  size_t dash = text.find('-');
  bool has_days = dash != std::string::npos;
  if (has_days) {
    days = to_int(text.substr(0, dash), what, 365);
    rest = text.substr(dash + 1);
  }
  auto parts = split(rest, ':');
  if (parts.size() > 3) bad(what + ": too many ':'");
  std::vector<int64_t> v;
  for (auto& p : parts) v.push_back(to_int(p, what, 100000000));
  int64_t s = 0;
  if (has_days) {  // D-H, D-H:M, D-H:M:S
    s = v[0] * 3600 + (v.size() > 1 ? v[1] * 60 : 0) + (v.size() > 2 ? v[2] : 0);
  } else if (v.size() == 1) {  // M
    s = v[0] * 60;
  } else if (v.size() == 2) {  // M:S
    s = v[0] * 60 + v[1];
  } else {  // H:M:S
    s = v[0] * 3600 + v[1] * 60 + v[2];
  }
  s += days * 86400;
  if (s == 0) return 0;
  return s;
}

int parse_signal_name(const std::string& text) {
  if (auto sig = common::parse_signal(text)) return *sig;
  bad(fmt::format("unknown signal '{}' (expected a name such as USR1 or a number 1-64)", text));
}

std::string signal_name(int sig) {
  return common::signal_name(sig).substr(3);  // Slurm writes USR1, not SIGUSR1
}

SignalSpec parse_signal_spec(const std::string& text) {
  SignalSpec s;
  std::string rest = text;
  if (rest.rfind("B:", 0) == 0) {
    s.batch_only = true;
    rest = rest.substr(2);
  } else if (rest.rfind("R:", 0) == 0) {
    rest = rest.substr(2);  // reservations do not exist here; same as plain
  }
  size_t at = rest.find('@');
  if (at != std::string::npos) {
    s.lead_seconds =
        static_cast<int>(to_int(rest.substr(at + 1), "--signal seconds", kMaxSignalLeadS));
    rest = rest.substr(0, at);
  }
  if (rest.empty()) bad(fmt::format("--signal '{}': no signal", text));
  s.signal = parse_signal_name(rest);
  return s;
}

unsigned parse_mail_type(const std::string& text, std::vector<std::string>* ignored) {
  static const std::set<std::string> kNotSent = {"ARRAY_TASKS", "INVALID_DEPEND", "STAGE_OUT"};
  unsigned events = 0;
  for (const auto& word : split(text, ',')) {
    if (const unsigned event = mail_event_named(word))
      events |= event;
    else if (word == "ALL")
      events |= kMailAll;
    else if (kNotSent.count(word) && ignored)
      ignored->push_back(word);
    else if (word != "NONE" && !kNotSent.count(word))
      bad(fmt::format("--mail-type '{}': unknown type '{}' (expected a comma-separated list of "
                      "NONE, BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT, TIME_LIMIT_90, "
                      "TIME_LIMIT_80, TIME_LIMIT_50)",
                      common::escape_control(text), common::escape_control(word)));
  }
  return events;
}

std::string parse_mail_user(const std::string& text) {
  if (!is_mail_address(text))
    bad(fmt::format("--mail-user '{}': expected one address, user or user@host, of at most {} "
                    "bytes, without spaces, commas, brackets, quotes or control characters",
                    common::escape_control(text), kMaxMailUserBytes));
  return text;
}

std::vector<Dependency> parse_dependency(const std::string& text) {
  if (text.find('?') != std::string::npos)
    bad(fmt::format("--dependency '{}': '?' (any-of) is not supported by gpuq", text));
  std::vector<Dependency> out;
  for (const auto& item : split(text, ',')) {
    auto parts = split(item, ':');
    DepKind kind = DepKind::kAfterAny;
    size_t first = 1;
    if (all_digits(parts[0])) {
      first = 0;  // bare job id = afterany
    } else if (parts[0] == "afterok") {
      kind = DepKind::kAfterOk;
    } else if (parts[0] == "afterany") {
      kind = DepKind::kAfterAny;
    } else if (parts[0] == "afternotok") {
      kind = DepKind::kAfterNotOk;
    } else {
      bad(
          fmt::format("--dependency '{}': type '{}' is not supported (use afterok, afterany or "
                      "afternotok)",
                      text, parts[0]));
    }
    if (parts.size() <= first) bad(fmt::format("--dependency '{}': no job id", text));
    for (size_t k = first; k < parts.size(); ++k) {
      std::string id = parts[k];
      if (size_t plus = id.find('+'); plus != std::string::npos) id = id.substr(0, plus);
      int task = -1;  // ID_T: one task of an array
      if (size_t us = id.find('_'); us != std::string::npos) {
        task = int(to_int(id.substr(us + 1), fmt::format("--dependency '{}': task id", text),
                          kMaxArrayIndex));
        id = id.substr(0, us);
      }
      int64_t n = to_int(id, fmt::format("--dependency '{}'", text), kMaxDependencyId);
      if (n == 0) bad(fmt::format("--dependency '{}': job id 0", text));
      out.push_back({kind, n, task});
    }
  }
  return out;
}

ArraySpec parse_array(const std::string& text) {
  constexpr int64_t kMaxIndex = kMaxArrayIndex;
  constexpr size_t kMaxTasks = kMaxArrayTasks;
  ArraySpec a;
  std::string list = text;
  size_t pct = text.find('%');
  if (pct != std::string::npos) {
    const std::string cap = text.substr(pct + 1);
    if (cap.empty() || cap.find_first_not_of("0123456789") != std::string::npos || cap.size() > 9 ||
        std::stol(cap) < 1 || std::stol(cap) > kMaxArrayCap)
      bad(fmt::format("--array '{}': the %limit '{}' must be a whole number from 1 to {}", text, cap,
                      kMaxArrayCap));
    a.max_running = static_cast<int>(std::stol(cap));
    list = text.substr(0, pct);
  }
  std::set<int> seen;
  for (const auto& item : split(list, ',')) {
    std::string range = item;
    int64_t step = 1;
    size_t colon = item.find(':');
    if (colon != std::string::npos) {
      step = to_int(item.substr(colon + 1), fmt::format("--array '{}' step", text), kMaxIndex);
      if (step == 0) bad(fmt::format("--array '{}': step 0", text));
      range = item.substr(0, colon);
    }
    size_t dash = range.find('-');
    int64_t lo = to_int(range.substr(0, dash), fmt::format("--array '{}'", text), kMaxIndex);
    int64_t hi = dash == std::string::npos
                     ? lo
                     : to_int(range.substr(dash + 1), fmt::format("--array '{}'", text), kMaxIndex);
    if (hi < lo) bad(fmt::format("--array '{}': range {} is backwards", text, range));
    for (int64_t v = lo; v <= hi; v += step) {
      if (seen.insert(static_cast<int>(v)).second) a.indices.push_back(static_cast<int>(v));
      if (a.indices.size() > kMaxTasks)
        bad(fmt::format("--array '{}': more than {} tasks", text, kMaxTasks));
    }
  }
  return a;
}

namespace {

// The count of one --gres entry: "gpu" (1), "gpu:type" (1), "gpu:N", "gpu:type:N"; likewise shard.
int gres_count(const std::vector<std::string>& parts, const std::string& text, int max) {
  if (parts.size() == 1) return 1;
  const std::string& last = parts.back();
  // A type is a name (a100, v100-sxm2); what starts with a digit or '-' was meant as a count:
  // "gpu:-1" or "gpu:2x" ran with one GPU as if it named a type.
  const bool type_name =
      !last.empty() && !std::isdigit(static_cast<unsigned char>(last[0])) && last[0] != '-';
  if (parts.size() == 2 && type_name) return 1;
  if (parts.size() > 3) bad(fmt::format("--gres '{}': too many ':'", text));
  return static_cast<int>(to_int(last, fmt::format("--gres '{}'", text), max));
}

}  // namespace

GresRequest parse_gres(const std::string& text) {
  GresRequest g;
  bool any = false;
  for (const auto& entry : split(text, ',')) {
    auto parts = split(entry, ':');
    if (parts[0] == "shard") {
      g.shards += gres_count(parts, text, kMaxShardsPerGpu);
      any = true;
    } else if (parts[0] == "gpu") {
      g.gpus += gres_count(parts, text, kMaxJobGpus);
      const bool named = parts.size() == 3 || (parts.size() == 2 && !parts[1].empty() &&
                                               !std::isdigit(static_cast<unsigned char>(parts[1][0])));
      if (named) g.type = parts[1];
      any = true;
    }  // other GRES are not managed here
  }
  if (!any)
    bad(fmt::format("--gres '{}': no gpu or shard entry (expected gpu[:type]:N or shard:K)", text));
  if (g.gpus > kMaxJobGpus)
    bad(fmt::format("--gres '{}': {} GPUs, more than {}", text, g.gpus, kMaxJobGpus));
  if (g.shards > kMaxShardsPerGpu)
    bad(fmt::format("--gres '{}': {} shards, more than {}", text, g.shards, kMaxShardsPerGpu));
  if (g.gpus && g.shards)
    bad(fmt::format("--gres '{}': whole GPUs or shards of one, not both", text));
  return g;
}

int parse_gpus(const std::string& text, const std::string& option, int least) {
  auto parts = split(text, ':');
  if (parts.size() > 2) bad(fmt::format("{} '{}': expected [type:]N", option, text));
  const auto n = to_int(parts.back(), fmt::format("{} '{}'", option, text), kMaxJobGpus);
  if (n < least) bad(fmt::format("{} '{}': expected [type:]N, N at least {}", option, text, least));
  return static_cast<int>(n);
}

std::string expand_output_pattern(const std::string& pattern, const PatternVars& v) {
  if (pattern.find('\\') != std::string::npos) {
    std::string out;
    for (char c : pattern)
      if (c != '\\') out += c;
    return out;
  }
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '%' || i + 1 >= pattern.size()) {
      out += c;
      continue;
    }
    size_t j = i + 1;
    int width = 0;
    // As Slurm's: a width over 10 pads to 10 (%999j made 999 bytes of each id).
    while (j < pattern.size() && isdigit(static_cast<unsigned char>(pattern[j])))
      width = std::min(10, width * 10 + (pattern[j++] - '0'));
    if (j >= pattern.size()) {
      out += pattern.substr(i);
      break;
    }
    auto num = [&](int64_t n) { return fmt::format("{:0{}}", n, width); };
    switch (pattern[j]) {
      case '%':
        out += '%';
        break;
      case 'j':
      case 'J':
        out += num(v.job_id);
        break;
      case 'A':
        out += num(v.array_job_id ? v.array_job_id : v.job_id);
        break;
      case 'a':
        out += v.array_task_id >= 0 ? num(v.array_task_id) : num(4294967294LL);
        break;
      case 'x':
        out += v.job_name;
        break;
      case 'u':
        out += v.user;
        break;
      case 'N':
        out += v.host;
        break;
      case 'n':
      case 't':
        out += num(0);
        break;
      case 's':
        out += "batch";
        break;
      default:
        out += pattern.substr(i, j - i + 1);
        break;  // unknown: kept literally
    }
    i = j;
  }
  return out;
}

}  // namespace gpurun::queue

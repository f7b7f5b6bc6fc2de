// #SBATCH and sbatch-option parsing (see sbatch.h for the rules followed).
#include "gpurun/queue/sbatch.h"

#include <fmt/format.h>

#include <csignal>
#include <cstring>
#include <set>
#include <stdexcept>

namespace gpurun::queue {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument(what);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// Non-negative integer with a sanity bound, naming `what` in errors.
int64_t to_int(const std::string& s, const std::string& what, int64_t max) {
  if (!all_digits(s) || s.size() > 12) bad(fmt::format("{}: '{}' is not a number", what, s));
  int64_t v = std::stoll(s);
  if (v > max) bad(fmt::format("{}: {} is larger than {}", what, v, max));
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) return out;
    pos = next + 1;
  }
}

// Splits a directive tail into words: whitespace separates, quotes group, an unquoted '#' that
// starts a word begins a comment.
std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (char c : line) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        cur += c;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      if (in_word) words.push_back(cur);
      cur.clear();
      in_word = false;
    } else if (c == '#' && !in_word) {
      break;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote) bad(fmt::format("unterminated quote in '#SBATCH{}'", line));
  if (in_word) words.push_back(cur);
  return words;
}

// Options gpuq knows but ignores (with a warning). true = takes a value.
const std::map<std::string, bool>& ignored_options() {
  static const std::map<std::string, bool> m = {
      {"-N", true},
      {"--nodes", true},
      {"-n", true},
      {"--ntasks", true},
      {"-c", true},
      {"--cpus-per-task", true},
      {"--mem", true},
      {"--mem-per-cpu", true},
      {"--mem-per-gpu", true},
      {"-p", true},
      {"--partition", true},
      {"-A", true},
      {"--account", true},
      {"-q", true},
      {"--qos", true},
      {"--reservation", true},
      {"--mail-type", true},
      {"--mail-user", true},
      {"--export", true},
      {"--ntasks-per-node", true},
      {"--constraint", true},
      {"-C", true},
      {"--exclusive", false},
      {"--open-mode", true},
      {"--nice", true},
      {"--tasks-per-node", true},
      {"--gpus-per-task", true},
      {"--cpus-per-gpu", true},
      {"--parsable", false},
      {"--wait", false},
      {"-W", false},
      {"--get-user-env", false},
      {"--propagate", true},
  };
  return m;
}

// Options gpuq implements. true = takes a value.
const std::map<std::string, std::pair<std::string, bool>>& known_options() {
  static const std::map<std::string, std::pair<std::string, bool>> m = {
      {"-J", {"--job-name", true}},
      {"--job-name", {"--job-name", true}},
      {"--gres", {"--gres", true}},
      {"-G", {"--gpus", true}},
      {"--gpus", {"--gpus", true}},
      {"--gpus-per-node", {"--gpus", true}},
      {"-t", {"--time", true}},
      {"--time", {"--time", true}},
      {"-o", {"--output", true}},
      {"--output", {"--output", true}},
      {"-e", {"--error", true}},
      {"--error", {"--error", true}},
      {"-D", {"--chdir", true}},
      {"--chdir", {"--chdir", true}},
      {"-d", {"--dependency", true}},
      {"--dependency", {"--dependency", true}},
      {"-a", {"--array", true}},
      {"--array", {"--array", true}},
      {"--signal", {"--signal", true}},
      {"--requeue", {"--requeue", false}},
      {"--no-requeue", {"--no-requeue", false}},
      {"-H", {"--hold", false}},
      {"--hold", {"--hold", false}},
      {"--priority", {"--priority", true}},
  };
  return m;
}

void apply(JobRequest& r, const std::string& opt, const std::string& v) {
  if (opt == "--job-name") {
    if (v.empty()) bad("--job-name: empty name");
    r.job_name = v;
  } else if (opt == "--gres") {
    r.gpus = parse_gres_gpus(v);
  } else if (opt == "--gpus") {
    r.gpus = parse_gpus(v);
  } else if (opt == "--time") {
    r.time_limit_s = parse_time_limit(v);
  } else if (opt == "--output") {
    if (v.empty()) bad("--output: empty path");
    r.output = v;
  } else if (opt == "--error") {
    if (v.empty()) bad("--error: empty path");
    r.error = v;
  } else if (opt == "--chdir") {
    if (v.empty()) bad("--chdir: empty path");
    r.chdir = v;
  } else if (opt == "--dependency") {
    r.dependencies = parse_dependency(v);
  } else if (opt == "--array") {
    r.array = parse_array(v);
  } else if (opt == "--signal") {
    r.signal = parse_signal_spec(v);
  } else if (opt == "--requeue") {
    r.requeue = true;
  } else if (opt == "--no-requeue") {
    r.requeue = false;
  } else if (opt == "--hold") {
    r.hold = true;
  } else if (opt == "--priority") {
    r.priority = static_cast<int>(to_int(v, "--priority", 1000000));
  }
}

}  // namespace

std::vector<std::string> sbatch_directive_words(const std::string& script) {
  std::vector<std::string> words;
  size_t pos = 0;
  bool first = true;
  while (pos < script.size()) {
    size_t nl = script.find('\n', pos);
    std::string line = script.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? script.size() : nl + 1;
    if (first && line.rfind("#!", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    size_t k = line.find_first_not_of(" \t\r");
    if (k == std::string::npos) continue;         // blank
    if (line[k] != '#') break;                    // first command: Slurm stops here
    if (line.rfind("#SBATCH", 0) != 0) continue;  // other comments, "# SBATCH" included
    std::string tail = line.substr(7);
    if (!tail.empty() && tail[0] != ' ' && tail[0] != '\t') continue;  // "#SBATCHX"
    for (auto& w : split_words(tail)) words.push_back(std::move(w));
  }
  return words;
}

JobRequest parse_sbatch_options(const std::vector<std::string>& words, size_t* first_positional) {
  JobRequest r;
  size_t i = 0;
  for (; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.size() < 2 || w[0] != '-') break;  // the script (or "-" alone)
    if (w == "--") {
      ++i;
      break;
    }
    std::string name = w, value;
    bool has_value = false;
    if (w.rfind("--", 0) == 0) {
      size_t eq = w.find('=');
      if (eq != std::string::npos) {
        name = w.substr(0, eq);
        value = w.substr(eq + 1);
        has_value = true;
      }
    } else if (w.size() > 2) {  // -ofile
      name = w.substr(0, 2);
      value = w.substr(2);
      has_value = true;
    }
    auto k = known_options().find(name);
    if (k != known_options().end()) {
      const auto& [canon, takes] = k->second;
      if (takes && !has_value) {
        if (i + 1 >= words.size()) bad(fmt::format("option '{}' needs a value", name));
        value = words[++i];
      } else if (!takes && has_value) {
        bad(fmt::format("option '{}' takes no value (got '{}')", name, w));
      }
      apply(r, canon, value);
      continue;
    }
    auto ig = ignored_options().find(name);
    bool takes = ig != ignored_options().end() ? ig->second
                                               : (i + 1 < words.size() && !has_value &&
                                                  !words[i + 1].empty() && words[i + 1][0] != '-');
    if (takes && !has_value && i + 1 < words.size()) value = words[++i];
    r.warnings.push_back(fmt::format("{} option '{}' ignored",
                                     ig != ignored_options().end() ? "unsupported" : "unknown", w));
  }
  if (first_positional) *first_positional = i;
  return r;
}

JobRequest parse_sbatch_script(const std::string& script) {
  auto words = sbatch_directive_words(script);
  size_t pos = 0;
  JobRequest r = parse_sbatch_options(words, &pos);
  if (pos < words.size())
    bad(fmt::format("#SBATCH: '{}' is not an option (directives take options only)", words[pos]));
  return r;
}

int64_t parse_time_limit(const std::string& text) {
  if (text == "0" || text == "UNLIMITED" || text == "INFINITE" || text == "unlimited") return 0;
  const std::string what = fmt::format("time limit '{}'", text);
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

namespace {
const std::vector<std::pair<const char*, int>>& signal_table() {
  static const std::vector<std::pair<const char*, int>> t = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ABRT", SIGABRT},
      {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"PIPE", SIGPIPE},
      {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP},
      {"TSTP", SIGTSTP}, {"URG", SIGURG},   {"XCPU", SIGXCPU}, {"WINCH", SIGWINCH},
  };
  return t;
}
}  // namespace

int parse_signal_name(const std::string& text) {
  if (all_digits(text)) {
    int64_t n = to_int(text, "signal", 64);
    if (n < 1) bad(fmt::format("signal '{}' out of range", text));
    return static_cast<int>(n);
  }
  std::string name = text;
  for (auto& c : name) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (const auto& [n, v] : signal_table())
    if (name == n) return v;
  bad(fmt::format("unknown signal '{}'", text));
}

std::string signal_name(int sig) {
  for (const auto& [n, v] : signal_table())
    if (v == sig) return n;
  return std::to_string(sig);
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
    s.lead_seconds = static_cast<int>(to_int(rest.substr(at + 1), "--signal seconds", 65535));
    rest = rest.substr(0, at);
  }
  if (rest.empty()) bad(fmt::format("--signal '{}': no signal", text));
  s.signal = parse_signal_name(rest);
  return s;
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
      if (id.find('_') != std::string::npos)
        bad(fmt::format("--dependency '{}': array task ids are not supported", text));
      int64_t n = to_int(id, fmt::format("--dependency '{}'", text), 1LL << 50);
      if (n == 0) bad(fmt::format("--dependency '{}': job id 0", text));
      out.push_back({kind, n});
    }
  }
  return out;
}

ArraySpec parse_array(const std::string& text) {
  constexpr int64_t kMaxIndex = 1000000;
  constexpr size_t kMaxTasks = 10000;
  ArraySpec a;
  std::string list = text;
  size_t pct = text.find('%');
  if (pct != std::string::npos) {
    a.max_running = static_cast<int>(to_int(text.substr(pct + 1), "--array %limit", 100000));
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

int parse_gres_gpus(const std::string& text) {
  int total = 0;
  bool any = false;
  for (const auto& entry : split(text, ',')) {
    auto parts = split(entry, ':');
    if (parts[0] != "gpu") continue;  // other GRES are not managed here
    any = true;
    if (parts.size() == 1) {
      total += 1;
    } else {
      const std::string& last = parts.back();
      if (parts.size() == 2 && !all_digits(last)) {
        total += 1;  // gpu:type
      } else {
        if (parts.size() > 3) bad(fmt::format("--gres '{}': too many ':'", text));
        total += static_cast<int>(to_int(last, fmt::format("--gres '{}'", text), 1024));
      }
    }
  }
  if (!any) bad(fmt::format("--gres '{}': no gpu entry (expected gpu[:type]:N)", text));
  return total;
}

int parse_gpus(const std::string& text) {
  auto parts = split(text, ':');
  if (parts.size() > 2) bad(fmt::format("--gpus '{}': expected [type:]N", text));
  return static_cast<int>(to_int(parts.back(), fmt::format("--gpus '{}'", text), 1024));
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
    while (j < pattern.size() && isdigit(static_cast<unsigned char>(pattern[j])) && width < 100)
      width = width * 10 + (pattern[j++] - '0');
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

// env_util.cc: see env_util.h.
#include "alloc/env_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <sstream>

#include "gpurun/common/terminal.h"
#include "gpurun/launcher/error.h"

namespace gpurun::launcher::detail {

std::optional<std::string> get(const Env& env, const std::string& key) {
  auto it = env.find(key);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::string temp_dir(const Env& env) {
  auto tmp = env.find("TMPDIR");
  return tmp != env.end() && !tmp->second.empty() ? tmp->second : "/tmp";
}

std::optional<std::pair<std::string, std::string>> first_of(const Env& env,
                                                            const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    auto v = get(env, k);
    if (v && !trim(*v).empty()) return std::make_pair(k, trim(*v));
  }
  return std::nullopt;
}

long parse_count(const std::string& name, const std::string& value) {
  std::string v = trim(value);
  if (v.empty() || v.size() > 18 ||
      !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw Error(fmt::format("{}='{}': expected a non-negative whole number", name, value));
  return std::stol(v);  // long is 64-bit here: Slurm step ids reach 4294967292
}

std::optional<long> get_count(const Env& env, const std::string& key) {
  auto v = get(env, key);
  if (!v || trim(*v).empty()) return std::nullopt;
  return parse_count(key, *v);
}

std::vector<std::string> split_ws(const std::string& s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  std::string w;
  while (is >> w) out.push_back(w);
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  std::string line;
  while (std::getline(is, line)) {
    line = trim(line);
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string format_ranges(const std::vector<int>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j > i ? fmt::format("{}-{}", v[i], v[j]) : std::to_string(v[i]);
    i = j + 1;
  }
  return out;
}

namespace {

// The length of a NAME= start (env's names may hold '%', as BASH_FUNC_module%%), or 0.
std::size_t name_and_equals(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size() &&
         (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_' || (i > 0 && s[i] == '%')))
    ++i;
  return i > 0 && i < s.size() && s[i] == '=' && !std::isdigit(static_cast<unsigned char>(s[0]))
             ? i + 1
             : 0;
}

// A shell word's value from `text` at `at` ("...", '...', bare with \ escapes); false when it
// is not closed by the end of `text` (the caller adds the next line).
bool shell_value(const std::string& text, std::string& out) {
  out.clear();
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '\'') {
      if (c == '\'')
        quote = 0;
      else
        out += c;
    } else if (c == '\\' && i + 1 < text.size() &&
               (!quote || std::string("$`\"\\\n").find(text[i + 1]) != std::string::npos)) {
      out += text[++i];
    } else if (quote == '"') {
      if (c == '"')
        quote = 0;
      else
        out += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else {
      out += c;
    }
  }
  return quote == 0;
}

// Drops an `export ` or `declare -FLAGS ` prefix (export -p, declare -px: -x, -rx, -ix, ...) from
// `t`; true when there was one, and the value is then shell-quoted.
bool shell_prefix(std::string& t) {
  std::size_t at = 0;
  if (t.rfind("export ", 0) == 0) {
    at = 7;
  } else if (t.rfind("declare -", 0) == 0) {
    at = t.find(' ', 9);
    if (at == std::string::npos) return false;
    ++at;
  } else {
    return false;
  }
  t = trim(t.substr(at));
  return true;
}

}  // namespace

Env parse_env_text(const std::string& text, const std::string& origin) {
  Env env;
  std::istringstream is(text);
  std::string line, last, pending;  // pending: a quoted value still open, with its name
  int n = 0;
  while (std::getline(is, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!pending.empty()) {  // inside an export's quoted value
      pending += "\n" + line;
      std::string v;
      const std::size_t eq = name_and_equals(pending);
      if (shell_value(pending.substr(eq), v)) env[last] = v, pending.clear();
      continue;
    }
    // env's next line of a multi-line value (a function's body: indented, or a closing brace).
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    if (indented && !last.empty()) {
      env[last] += "\n" + line;
      continue;
    }
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const bool shell = shell_prefix(t);
    const std::size_t eq = name_and_equals(t);
    if (eq == 0) {
      if (shell && name_and_equals(t + "=") == t.size() + 1) continue;  // exported, unset
      if (!shell && !last.empty()) {
        env[last] += "\n" + line;
        continue;
      }
      throw Error(fmt::format("{}:{}: expected NAME=VALUE, got '{}'", origin, n, shown(line, 60)));
    }
    last = t.substr(0, eq - 1);
    if (!shell) {
      env[last] = t.substr(eq);
    } else if (std::string v; shell_value(t.substr(eq), v)) {
      env[last] = v;
    } else {
      pending = t;
    }
  }
  if (!pending.empty())
    throw Error(fmt::format("{}: the quoted value of {} is not closed", origin, last));
  return env;
}

int slot_count(const std::string& origin, long slots, const std::string& host) {
  if (slots < 1 || slots > kMaxNodeSlots)
    throw Error(fmt::format("{}: node {} has {} task slots; expected 1 to {} per node", origin,
                            shown(host), slots, kMaxNodeSlots));
  return static_cast<int>(slots);
}

bool is_host_name(std::string_view host) {
  return !host.empty() && host.size() <= kMaxHostName &&
         std::all_of(host.begin(), host.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
         });
}

void check_host(const std::string& var, const std::string& host) {
  if (!is_host_name(host))
    throw Error(
        fmt::format("{}: '{}' is not a host name: expected 1 to {} letters, digits, '-', "
                    "'.' or '_'",
                    var, shown(host, 40), kMaxHostName));
}

std::string shown(std::string_view text, std::size_t max) {
  if (text.size() <= max) return common::escape_control(text);
  return common::escape_control(text.substr(0, max)) + fmt::format("... ({} bytes)", text.size());
}

void NodesInOrder::add(const std::string& host, int slots, const std::string& origin) {
  auto [it, fresh] = index_.emplace(host, nodes_.size());
  if (fresh)
    nodes_.push_back(NodeAlloc{host, 0, 0});
  else if (it->second + 1 != nodes_.size())
    interleaved_ = true;
  NodeAlloc& node = nodes_[it->second];
  if (slots > kMaxNodeSlots - node.slots || nodes_.size() > static_cast<std::size_t>(kMaxRanks))
    throw Error(fmt::format("{}: more than {} task slots for host {}, or more than {} hosts",
                            origin, kMaxNodeSlots, shown(host), kMaxRanks));
  node.slots += slots;
}

namespace {

// One line of a host file: its first word must be a host name and the rest printable (Torque
// may append ":ppn" or columns). Throws Error naming where() (VAR=PATH:LINE).
std::string host_of_line(const std::string& line, const std::function<std::string()>& where) {
  for (char c : line)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == '\x7f')
      throw Error(
          fmt::format("{}: '{}' holds a control character: a host file has printable "
                      "lines, one host name each (a binary file?)",
                      where(), shown(line, 40)));
  const std::string name = line.substr(0, line.find_first_of(" \t:"));  // Torque's "host:ppn=4"
  if (!is_host_name(name)) check_host(where(), name);
  return name;
}

}  // namespace

std::string read_bounded(const DetectInput& in, const std::string& var, const std::string& path) {
  std::optional<std::string> text;
  try {
    text = in.read_file ? in.read_file(path) : std::nullopt;
  } catch (const Error& e) {
    throw Error(fmt::format("{}={}: {}", var, shown(path), e.what()));
  }
  if (!text)
    throw Error(fmt::format("{}={}: cannot be read (missing or not readable)", var, shown(path)));
  return *text;
}

std::vector<NodeAlloc> read_host_file(const DetectInput& in, const std::string& var,
                                      bool* interleaved) {
  auto path = get(in.env, var);
  if (!path || trim(*path).empty()) throw Error(fmt::format("{} is not set", var));
  const std::string text = read_bounded(in, var, *path);
  NodesInOrder nodes;
  std::istringstream is(text);
  std::string raw;
  long lines = 0;
  for (int n = 1; std::getline(is, raw); ++n) {
    const std::string line = trim(raw);
    if (line.empty()) continue;
    auto where = [&] { return fmt::format("{}={}:{}", var, shown(*path), n); };
    if (++lines > kMaxRanks)  // a line per task slot: more lines than a plan's ranks is no job
      throw Error(fmt::format("{}: more than {} lines (one per task slot)", where(), kMaxRanks));
    nodes.add(host_of_line(line, where), 1, var);
  }
  if (interleaved) *interleaved = nodes.interleaved();
  std::vector<NodeAlloc> out = nodes.take();
  if (out.empty()) throw Error(fmt::format("{}={}: the host file is empty", var, shown(*path)));
  return out;
}

}  // namespace gpurun::launcher::detail

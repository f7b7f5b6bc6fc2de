// stacks.cc: see stacks.h.
#include "stacks/stacks.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>

#include "alloc/env_util.h"
#include "gpurun/common/posix.h"
#include "sys/proc_util.h"

namespace gpurun::launcher::stacks {
namespace {

// --- reading the tools' text ---------------------------------------------------------------

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream is{std::string(text)};
  std::string l;
  while (std::getline(is, l)) out.push_back(l);
  return out;
}

// A frame's function, as glibc's public name: "clock_nanosleep@GLIBC_2.2.5" -> clock_nanosleep,
// "__GI___nanosleep" -> nanosleep; "" for glibc's helpers (*_implementation, *_internal) and
// frames without a symbol.
std::string normalize(std::string name) {
  if (auto at = name.find('@'); at != std::string::npos) name.resize(at);
  if (name.rfind("__GI_", 0) == 0) name.erase(0, 5);
  auto ends = [&](const char* s) {
    std::string_view suf(s);
    return name.size() > suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
  };
  if (ends("_implementation") || ends("_internal")) return "";
  name.erase(0, name.find_first_not_of('_') == std::string::npos ? name.size()
                                                                 : name.find_first_not_of('_'));
  if (name == "??" || name.rfind("0x", 0) == 0) return "";
  return name;
}

// Frame function names of one thread block, innermost first. eu-stack: "#0  0xADDR name";
// gdb: "#0  0xADDR in name (args) ..." or "#0  name (args) at ...".
std::vector<std::string> frames(const std::vector<std::string>& block) {
  static const std::regex frame(R"(^#\d+\s+(?:0x[0-9a-fA-F]+\s+(?:in\s+)?)?([^\s(]+))");
  std::vector<std::string> out;
  std::smatch m;
  for (const auto& l : block)
    if (std::regex_search(l, m, frame)) out.push_back(normalize(m[1]));
  return out;
}

// The main thread's lines of one process's tool output: the thread whose id is the process id
// (eu-stack "TID n:", gdb "(LWP n)"), else gdb's Thread 1, else the first thread.
std::vector<std::string> main_thread(const std::vector<std::string>& lines, long pid) {
  static const std::regex header(R"(^(?:TID (\d+):|Thread (\d+) \(.*\(LWP (\d+)\)))");
  static const std::regex eu_pid(R"(^PID (\d+) - process)");
  std::map<long, std::vector<std::string>> by_tid;
  std::vector<long> order;
  long gdb_one = -1, cur = -1;
  std::smatch m;
  for (const auto& l : lines) {
    if (pid < 0 && std::regex_search(l, m, eu_pid)) pid = std::stol(m[1]);
    if (std::regex_search(l, m, header)) {
      cur = m[1].matched ? std::stol(m[1]) : std::stol(m[3]);
      if (m[2].matched && m[2] == "1") gdb_one = cur;
      order.push_back(cur);
    } else if (cur >= 0) {
      by_tid[cur].push_back(l);
    }
  }
  if (order.empty()) return lines;  // one thread, no headers
  if (by_tid.count(pid)) return by_tid[pid];
  if (by_tid.count(gdb_one)) return by_tid[gdb_one];
  return by_tid[order.front()];
}

// The outermost MPI/NCCL/CUDA entry point in `fs` ("MPI_Allreduce"), or "".
std::string api_call(const std::vector<std::string>& fs) {
  static const std::regex api(R"(^(P?MPI_[A-Za-z_]+|nccl[A-Z]\w*|cuda[A-Z]\w*)$)");
  std::string found;
  for (const auto& f : fs)
    if (std::regex_match(f, api)) found = f.rfind("PMPI_", 0) == 0 ? f.substr(1) : f;
  return found;
}

std::string innermost(const std::vector<std::string>& fs) {
  for (const auto& f : fs)
    if (!f.empty()) return f;
  return "";
}

// Whether a traceback's file is library code rather than the user's: a package under
// site-packages or dist-packages, the standard library (.../lib/pythonX.Y/, lib-dynload), or a
// frozen module. "<string>" (python -c) and "<stdin>" are the user's.
bool library_file(const std::string& path) {
  static const std::regex stdlib(R"(/lib/python\d+(\.\d+)?/)");
  return path.find("/site-packages/") != std::string::npos ||
         path.find("/dist-packages/") != std::string::npos || std::regex_search(path, stdlib) ||
         path.rfind("<frozen ", 0) == 0;
}

// The frame to name for a Python process, as "file.py:LINE in func": in the main thread (the one
// that runs <module>, else the first thread), the innermost frame in the user's own files, else
// its innermost frame.
std::string python_frame(const std::vector<std::string>& lines) {
  static const std::regex file(R"re(^\s+File "([^"]*)", line (\d+) in (.*)$)re");
  struct Block {
    std::string innermost, user;
    bool main = false;
  };
  std::vector<Block> blocks;
  std::smatch m;
  for (const auto& l : lines) {
    if (l.find("(most recent call first):") != std::string::npos || blocks.empty())
      blocks.emplace_back();  // a new thread
    if (!std::regex_match(l, m, file)) continue;
    const std::string path = m[1];
    const std::size_t slash = path.find_last_of('/');
    const std::string here =
        fmt::format("{}:{} in {}", slash == std::string::npos ? path : path.substr(slash + 1),
                    m[2].str(), m[3].str());
    Block& b = blocks.back();
    if (b.innermost.empty()) b.innermost = here;
    if (b.user.empty() && !library_file(path)) b.user = here;
    b.main = b.main || m[3] == "<module>";
  }
  const Block* pick = nullptr;
  for (const auto& b : blocks)
    if (!pick && b.main) pick = &b;
  for (const auto& b : blocks)
    if (!pick && !b.innermost.empty()) pick = &b;
  if (!pick) return "";
  return pick->user.empty() ? pick->innermost : pick->user;
}

struct Section {
  long pid = -1;
  bool python = false;
  std::vector<std::string> lines;
};

// collect_stacks' text as its sections ("=== process PID (comm) ===", "=== python tracebacks of
// process PID ==="); text without headers is one native section.
std::vector<Section> sections(std::string_view text) {
  static const std::regex head(R"(^=== (process|python tracebacks of process) (\d+))");
  std::vector<Section> out;
  std::smatch m;
  for (const auto& l : lines_of(text)) {
    if (std::regex_search(l, m, head)) {
      out.push_back({std::stol(m[2]), m[1] != "process", {}});
      continue;
    }
    if (out.empty()) out.push_back({});
    out.back().lines.push_back(l);
  }
  for (auto& s : out)
    if (!s.python)
      for (const auto& l : s.lines)
        if (l.find("(most recent call first):") != std::string::npos) s.python = true;
  return out;
}

bool waits_for_child(const std::string& f) {
  return f == "wait4" || f == "waitpid" || f == "waitid" || f == "wait";
}

}  // namespace

std::string where(std::string_view text) {
  std::vector<Section> secs = sections(text);
  std::string api, py, native, fallback;
  for (const auto& s : secs) {
    if (s.python) {
      if (py.empty()) py = python_frame(s.lines);
      continue;
    }
    std::vector<std::string> fs = frames(main_thread(s.lines, s.pid));
    if (api.empty()) api = api_call(fs);
    std::string inner = innermost(fs);
    if (fallback.empty()) fallback = inner;
    // A shell or launcher waiting for the real program says little: prefer the program.
    if (native.empty() && !inner.empty() && !waits_for_child(inner)) native = inner;
  }
  if (!api.empty()) return api;
  if (!py.empty()) return py;
  if (!native.empty()) return native;
  return fallback.empty() ? "unknown" : fallback;
}

std::string rank_list(const std::vector<int>& sorted_ranks) {
  return detail::format_ranges(sorted_ranks);
}

std::string hang_summary(const std::vector<RankWhere>& ranks) {
  // Groups by place and by being behind, in order of their first rank.
  std::vector<std::pair<std::string, bool>> order;
  std::map<std::pair<std::string, bool>, std::vector<int>> groups;
  for (const auto& r : ranks) {
    auto key = std::make_pair(r.where, r.behind);
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(r.rank);
  }
  std::string out;
  for (const auto& key : order) {
    std::vector<int>& all = groups[key];
    std::sort(all.begin(), all.end());
    if (!out.empty()) out += "; ";
    out +=
        fmt::format("{} {} in {}", all.size() == 1 ? "rank" : "ranks", rank_list(all), key.first);
    if (key.second) out += all.size() == 1 ? ": it is behind" : ": they are behind";
  }
  return out;
}

}  // namespace gpurun::launcher::stacks

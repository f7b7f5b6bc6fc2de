// hostlist.cc: Slurm hostlist expansion/compression and tasks-per-node lists (see hostlist.h).
#include "gpurun/launcher/hostlist.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "gpurun/common/terminal.h"
#include "gpurun/launcher/error.h"

namespace gpurun::launcher {

namespace {

// What an error shows of `input`: at most 60 bytes either side of `pos`, control characters
// escaped (a hostlist may come from a 64 MiB --env-file); `caret` is where `pos` lands in it.
std::string window(const std::string& input, std::size_t pos, std::size_t* caret = nullptr) {
  constexpr std::size_t kSide = 60;
  const std::size_t b = pos > kSide ? pos - kSide : 0;
  const std::size_t e = std::min(input.size(), pos + kSide);
  std::string head = (b > 0 ? "..." : "") + common::escape_control(input.substr(b, pos - b));
  if (caret) *caret = head.size();
  return head + common::escape_control(input.substr(std::min(pos, e), e - std::min(pos, e))) +
         (e < input.size() ? "..." : "");
}

std::string pointer_lines(const std::string& input, std::size_t pos) {
  std::size_t caret = 0;
  std::string text = window(input, pos, &caret);
  return fmt::format("  {}\n  {}^", text, std::string(caret, ' '));
}

}  // namespace

HostlistError::HostlistError(std::string input, std::size_t position, const std::string& reason)
    : Error(fmt::format("malformed hostlist '{}' at character {}: {}", window(input, position),
                        position + 1, reason),
            pointer_lines(input, position)),
      input_(std::move(input)),
      position_(position),
      reason_(reason) {}

std::string HostlistError::pointer() const {
  return detail();
}

namespace {

// Slurm's MAX_RANGE (= MAX_SLURM_NODES): one range may not name more hosts than this.
constexpr std::uint64_t kMaxRange = 65536;
// Numbers longer than this cannot be held exactly; Slurm has the same limit in practice.
constexpr std::size_t kMaxDigits = 18;

bool is_sep(char c) {
  return c == ',' || c == ' ' || c == '\t' || c == '\n';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string pad(std::uint64_t value, std::size_t width) {
  return fmt::format("{:0{}}", value, width);
}

// One piece of an item: literal text, or a bracket group expanded to its strings.
struct Segment {
  std::vector<std::string> alternatives;
};

class Parser {
 public:
  explicit Parser(std::string_view in) : in_(in) {}

  std::vector<std::string> run() {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < in_.size()) {
      if (is_sep(in_[i])) {
        ++i;
        continue;
      }
      i = item(i, out);
    }
    return out;
  }

 private:
  [[noreturn]] void fail(std::size_t pos, const std::string& why) const {
    throw HostlistError(std::string(in_), pos, why);
  }

  // Parses one item starting at `i`; appends its hosts; returns the index after it.
  std::size_t item(std::size_t i, std::vector<std::string>& out) {
    std::vector<Segment> segs;
    std::string text;
    while (i < in_.size() && !is_sep(in_[i])) {
      char c = in_[i];
      if (c == ']') fail(i, "']' without a matching '['");
      if (c == '[') {
        if (!text.empty()) segs.push_back(Segment{{text}});
        text.clear();
        std::size_t close = in_.find(']', i + 1);
        if (close == std::string_view::npos) fail(i, "'[' is never closed by ']'");
        segs.push_back(Segment{ranges(i + 1, close)});
        i = close + 1;
        continue;
      }
      text.push_back(c);
      ++i;
    }
    if (!text.empty()) segs.push_back(Segment{{text}});

    std::uint64_t total = 1;
    for (const auto& s : segs) {
      total *= s.alternatives.size();
      if (total + out.size() > kMaxHostlistHosts)
        fail(i - 1, fmt::format("expands to more than {} hosts", kMaxHostlistHosts));
    }
    // Cartesian product, left-major: the leftmost group varies slowest.
    std::vector<std::size_t> idx(segs.size(), 0);
    for (std::uint64_t n = 0; n < total; ++n) {
      std::string host;
      for (std::size_t k = 0; k < segs.size(); ++k) host += segs[k].alternatives[idx[k]];
      out.push_back(std::move(host));
      for (std::size_t k = segs.size(); k-- > 0;) {
        if (++idx[k] < segs[k].alternatives.size()) break;
        idx[k] = 0;
      }
    }
    return i;
  }

  // Reads a run of digits at `i`; returns its end. Fails if there is none.
  std::size_t number(std::size_t i, std::size_t end, std::uint64_t& value) const {
    std::size_t j = i;
    while (j < end && is_digit(in_[j])) ++j;
    if (j == i) {
      if (i < end && std::isspace(static_cast<unsigned char>(in_[i])))
        fail(i, "blank inside brackets (Slurm would count it into the width)");
      if (i < end && in_[i] == '[') fail(i, "brackets cannot nest");
      fail(i, i < end ? fmt::format("expected a number, found '{}'", in_[i])
                      : std::string("expected a number"));
    }
    if (j - i > kMaxDigits) fail(i, "number too long");
    value = std::stoull(std::string(in_.substr(i, j - i)));
    return j;
  }

  std::vector<std::string> ranges(std::size_t begin, std::size_t end) const {
    if (begin == end) fail(begin, "empty brackets");
    std::vector<std::string> out;
    std::size_t i = begin;
    while (true) {
      std::uint64_t lo = 0, hi = 0;
      std::size_t lo_end = number(i, end, lo);
      std::size_t width = lo_end - i;
      hi = lo;
      std::size_t j = lo_end;
      if (j < end && in_[j] == '-') {
        j = number(j + 1, end, hi);
        if (hi < lo) fail(lo_end + 1, fmt::format("range end {} is below its start {}", hi, lo));
        if (hi - lo + 1 > kMaxRange)
          fail(i, fmt::format("range of {} hosts exceeds Slurm's limit of {}", hi - lo + 1,
                              kMaxRange));
      }
      if (out.size() + (hi - lo + 1) > kMaxHostlistHosts)
        fail(i, fmt::format("expands to more than {} hosts", kMaxHostlistHosts));
      for (std::uint64_t v = lo; v <= hi; ++v) out.push_back(pad(v, width));
      if (j == end) break;
      if (in_[j] != ',') {
        if (std::isspace(static_cast<unsigned char>(in_[j])))
          fail(j, "blank inside brackets (Slurm would count it into the width)");
        fail(j, fmt::format("expected ',' '-' or ']', found '{}'", in_[j]));
      }
      i = j + 1;
      if (i == end) fail(i, "empty range after ','");
    }
    return out;
  }

  std::string_view in_;
};

// A host split around its last run of digits: prefix, number, suffix (suffix has no digits).
struct Split {
  std::string prefix, digits, suffix;
  std::uint64_t value = 0;
  bool numeric = false;
};

Split split_host(const std::string& h) {
  Split s;
  std::size_t e = h.size();
  while (e > 0 && !is_digit(h[e - 1])) --e;
  std::size_t b = e;
  while (b > 0 && is_digit(h[b - 1])) --b;
  if (e == 0 || e - b > kMaxDigits) {
    s.prefix = h;
    return s;
  }
  s.prefix = h.substr(0, b);
  s.digits = h.substr(b, e - b);
  s.suffix = h.substr(e);
  s.value = std::stoull(s.digits);
  s.numeric = true;
  return s;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expr) {
  return Parser(expr).run();
}

std::string compress_hostlist(const std::vector<std::string>& hosts) {
  for (const auto& h : hosts) {
    if (h.empty()) throw HostlistError(h, 0, "empty host name");
    for (std::size_t i = 0; i < h.size(); ++i) {
      char c = h[i];
      if (c == '[' || c == ']' || is_sep(c) || std::isspace(static_cast<unsigned char>(c)))
        throw HostlistError(h, i, "a host name cannot contain brackets, commas or blanks");
    }
  }
  std::string out;
  std::size_t i = 0;
  while (i < hosts.size()) {
    Split first = split_host(hosts[i]);
    if (!out.empty()) out += ',';
    if (!first.numeric) {
      out += hosts[i++];
      continue;
    }
    // Gather the run of hosts with the same prefix and suffix, then write it as ranges.
    std::vector<Split> run{first};
    std::size_t j = i + 1;
    while (j < hosts.size()) {
      Split s = split_host(hosts[j]);
      if (!s.numeric || s.prefix != first.prefix || s.suffix != first.suffix) break;
      run.push_back(std::move(s));
      ++j;
    }
    if (run.size() == 1) {
      out += hosts[i];
      i = j;
      continue;
    }
    std::string body;
    std::size_t k = 0;
    while (k < run.size()) {
      std::size_t width = run[k].digits.size();
      std::size_t m = k + 1;
      // A range prints every value with the low bound's width, so a host joins the range only
      // if that printing reproduces it exactly.
      while (m < run.size() && run[m].value == run[m - 1].value + 1 &&
             pad(run[m].value, width) == run[m].digits)
        ++m;
      if (!body.empty()) body += ',';
      body += run[k].digits;
      if (m - k > 1) body += "-" + run[m - 1].digits;
      k = m;
    }
    out += first.prefix + "[" + body + "]" + first.suffix;
    i = j;
  }
  return out;
}

std::vector<int> expand_tasks_per_node(std::string_view expr) {
  std::string in(expr);
  std::vector<int> out;
  auto fail = [&](std::size_t pos, const std::string& why) -> void {
    throw HostlistError(in, pos, why);
  };
  auto num = [&](std::size_t& i) -> long {
    std::size_t b = i;
    while (i < in.size() && is_digit(in[i])) ++i;
    if (i == b) fail(b, "expected a number");
    if (i - b > 9) fail(b, "number too large");
    return std::stol(in.substr(b, i - b));
  };
  if (in.empty()) fail(0, "empty tasks-per-node list");
  std::size_t i = 0;
  while (true) {
    long n = num(i);
    long reps = 1;
    if (i < in.size() && in[i] == '(') {
      if (i + 1 >= in.size() || in[i + 1] != 'x') fail(i + 1, "expected 'x' after '('");
      i += 2;
      std::size_t at = i;
      reps = num(i);
      if (reps < 1) fail(at, "repeat count must be at least 1");
      if (i >= in.size() || in[i] != ')') fail(i, "expected ')'");
      ++i;
    }
    if (out.size() + reps > kMaxHostlistHosts) fail(i - 1, "too many nodes");
    out.insert(out.end(), static_cast<std::size_t>(reps), static_cast<int>(n));
    if (i == in.size()) break;
    if (in[i] != ',') fail(i, fmt::format("expected ',' or '(x', found '{}'", in[i]));
    ++i;
    if (i == in.size()) fail(i, "empty item after ','");
  }
  return out;
}

std::string compress_tasks_per_node(const std::vector<int>& counts) {
  std::string out;
  std::size_t i = 0;
  while (i < counts.size()) {
    std::size_t j = i + 1;
    while (j < counts.size() && counts[j] == counts[i]) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(counts[i]);
    if (j - i > 1) out += fmt::format("(x{})", j - i);
    i = j;
  }
  return out;
}

}  // namespace gpurun::launcher

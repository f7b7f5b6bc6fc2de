// env_util.h: small helpers for reading an injected environment map with errors that name the
// variable at fault. Private to the launcher.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpurun/launcher/allocation.h"

namespace gpurun::launcher::detail {

std::optional<std::string> get(const Env& env, const std::string& key);
// Where temporary folders go: TMPDIR when set and not empty, else /tmp.
std::string temp_dir(const Env& env);
// The first of `keys` that is set (and non-empty), with its name.
std::optional<std::pair<std::string, std::string>> first_of(const Env& env,
                                                            const std::vector<std::string>& keys);
// Parses a non-negative integer held by variable `name`; throws Error naming it.
long parse_count(const std::string& name, const std::string& value);
std::optional<long> get_count(const Env& env, const std::string& key);
std::vector<std::string> split_ws(const std::string& s);
std::vector<std::string> split_lines(const std::string& s);
std::string trim(const std::string& s);
// "0-3,8,10-11" for {0,1,2,3,8,10,11} (sorted, distinct): CPU lists, rank lists.
std::string format_ranges(const std::vector<int>& sorted);

// An environment as `env`, `printenv`, `export -p` or `declare -px` print it, for --env-file:
// NAME=VALUE lines; a line that starts no NAME= continues the value before it (env prints a
// multi-line value, as Lmod's BASH_FUNC_module%%, over several lines); after `export ` or
// `declare -x ` the value is shell-quoted ("...", '...', \ escapes) and may span lines. Blank
// lines and # comments are skipped. Throws Error naming `origin` and the line otherwise.
Env parse_env_text(const std::string& text, const std::string& origin);

// A node's task slots as `origin` (a variable) gives them: 1 to kMaxNodeSlots, else Error naming
// `origin`, the host and the bounds (0 slots would plan a node with no rank).
int slot_count(const std::string& origin, long slots, const std::string& host);

// Whether `host` can be a host name: 1 to kMaxHostName bytes of letters, digits, '-', '.' and '_'
// (RFC 1123's characters, and '_', which some sites use).
bool is_host_name(std::string_view host);
// Throws Error naming variable `var` when `host` is not a host name.
void check_host(const std::string& var, const std::string& host);
// `text` for an error message: control characters escaped, cut to `max` bytes with "...".
std::string shown(std::string_view text, std::size_t max = 80);

// Nodes in order of first appearance, with their slots added up (host files and LSF's lists name
// a host once per slot, or once with a count), in time linear in the entries.
class NodesInOrder {
 public:
  // Adds `slots` to `host`'s node; throws Error naming `origin` past kMaxNodeSlots on one node
  // or kMaxRanks nodes.
  void add(const std::string& host, int slots, const std::string& origin);
  // Whether a host came back after another (a b a): entry order is not node order.
  bool interleaved() const { return interleaved_; }
  std::vector<NodeAlloc> take() { return std::move(nodes_); }

 private:
  std::vector<NodeAlloc> nodes_;
  std::unordered_map<std::string, std::size_t> index_;
  bool interleaved_ = false;
};

// The contents of file `path` named by variable `var` (in.read_file, bounded); throws Error naming
// both when it cannot be had or is refused.
std::string read_bounded(const DetectInput& in, const std::string& var, const std::string& path);

// Reads a host file (one host per slot, as PBS_NODEFILE/LSB_DJOB_HOSTFILE) named by variable
// `var`; groups lines into nodes by host in order of first appearance. Throws Error naming the
// variable when the file is missing, empty, not a regular file or pipe, larger than
// kMaxInputFileBytes, or when a line holds anything but a host name (and, after it, printable
// columns): the error names the file and the line. *interleaved (when given): a host's lines are
// not all together (a b a), so line order is not the nodes' order.
std::vector<NodeAlloc> read_host_file(const DetectInput& in, const std::string& var,
                                      bool* interleaved = nullptr);

}  // namespace gpurun::launcher::detail

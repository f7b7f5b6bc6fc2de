// #SBATCH and sbatch-option parsing (see sbatch.h for the rules followed).
#include "gpurun/queue/sbatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "job/parse_util.h"

namespace gpurun::queue {
namespace {

using parse_util::bad;
using parse_util::split;
using parse_util::to_int;

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

// Options gpuq knows but ignores (with a warning), by whether they take a value. gpuq submit's own
// (--parsable, --socket, --wrap: client.cc) are here too, so a script naming them only warns.
constexpr const char* kIgnoredWithValue[] = {"-N",
                                             "--nodes",
                                             "--mem",
                                             "--mem-per-cpu",
                                             "--mem-per-gpu",
                                             "-p",
                                             "--partition",
                                             "-q",
                                             "--qos",
                                             "--reservation",
                                             "--ntasks-per-node",
                                             "--constraint",
                                             "-C",
                                             "--nice",
                                             "--tasks-per-node",
                                             "--cpus-per-gpu",
                                             "-w",
                                             "--nodelist",
                                             "-x",
                                             "--exclude",
                                             "--comment",
                                             "-L",
                                             "--licenses",
                                             "--begin",
                                             "-b",
                                             "--time-min",
                                             "--deadline",
                                             "--gpu-bind",
                                             "--gpu-freq",
                                             "--cpu-freq",
                                             "--mem-bind",
                                             "-m",
                                             "--distribution",
                                             "--hint",
                                             "--threads-per-core",
                                             "--cores-per-socket",
                                             "--sockets-per-node",
                                             "--ntasks-per-core",
                                             "--ntasks-per-socket",
                                             "--ntasks-per-gpu",
                                             "--gres-flags",
                                             "--tmp",
                                             "--mincpus",
                                             "--kill-on-invalid-dep",
                                             "--wckey",
                                             "--profile",
                                             "--acctg-freq",
                                             "--switches",
                                             "--network",
                                             "--container",
                                             "-M",
                                             "--clusters",
                                             "-i",
                                             "--input",
                                             "--export-file",
                                             "--prefer",
                                             "--extra",
                                             "--core-spec",
                                             "--thread-spec",
                                             "--socket",
                                             "--wrap",
                                             "--propagate",
                                             "--batch",
                                             "--bb",
                                             "--bbf",
                                             "--cluster-constraint",
                                             "--container-id",
                                             "--delay-boot",
                                             "--extra-node-info",
                                             "--gid",
                                             "--mcs-label",
                                             "--nodefile",
                                             "--power",
                                             "--segment",
                                             "--tres-bind",
                                             "--tres-per-task",
                                             "--uid",
                                             "--wait-all-nodes"};
constexpr const char* kIgnoredFlags[] = {
    "--exclusive",     "-Q",       "--quiet",      "-v",           "--verbose",  "-s",
    "--oversubscribe", "-O",       "--overcommit", "-k",           "--no-kill",  "--spread-job",
    "--use-min-nodes", "--reboot", "--test-only",  "--ignore-pbs", "--parsable", "--get-user-env",
    "--contiguous"};

const std::map<std::string, bool>& ignored_options() {
  static const std::map<std::string, bool> m = [] {
    std::map<std::string, bool> t;
    for (const char* name : kIgnoredWithValue) t[name] = true;
    for (const char* name : kIgnoredFlags) t[name] = false;
    return t;
  }();
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
      {"--gpus-per-task", {"--gpus-per-task", true}},
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
      {"-A", {"--account", true}},
      {"--account", {"--account", true}},
      {"-c", {"--cpus-per-task", true}},
      {"--cpus-per-task", {"--cpus-per-task", true}},
      {"-n", {"--ntasks", true}},
      {"--ntasks", {"--ntasks", true}},
      {"-W", {"--wait", false}},
      {"--wait", {"--wait", false}},
      {"--mail-type", {"--mail-type", true}},
      {"--mail-user", {"--mail-user", true}},
      {"--export", {"--export", true}},
      {"--open-mode", {"--open-mode", true}},
      {"--gpus-per-socket", {"--gpus-per-socket", true}},
  };
  return m;
}

void apply(JobRequest& r, const std::string& opt, const std::string& v) {
  if (opt == "--job-name") {
    if (v.empty()) bad("--job-name: empty name");
    r.job_name = v;
  } else if (opt == "--gres") {
    GresRequest g = parse_gres(v);
    // gpu:WORD is one GPU of type WORD, as in Slurm; gpuq gives any GPU for a type that is not a
    // MIG profile, so a word meant as a count (gpu:two) would quietly ask for one.
    if (!g.type.empty() && v.find(':', v.find(g.type)) == std::string::npos &&
        !is_mig_profile(g.type))
      r.warnings.push_back(fmt::format(
          "--gres={}: '{}' is taken as a GPU type, which gpuq does not check: 1 GPU (gpu:N "
          "asks for N)",
          v, g.type));
    r.gpus = g.gpus;
    r.shards = g.shards;
    r.gpu_type = g.type;
    r.gpus_per_task.reset();
  } else if (opt == "--gpus") {
    r.gpus = parse_gpus(v);
    r.shards = 0;
    r.gpu_type = v.find(':') == std::string::npos ? "" : v.substr(0, v.find(':'));
    r.gpus_per_task.reset();
  } else if (opt == "--gpus-per-task") {
    r.gpus_per_task = parse_gpus(v, "--gpus-per-task", 1);  // srun's refuses 0 too
    r.gpu_type = v.find(':') == std::string::npos ? "" : v.substr(0, v.find(':'));
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
    r.priority = static_cast<int>(to_int(v, "--priority", kMaxPriority));
  } else if (opt == "--account") {
    if (v.empty()) bad("--account: empty name");
    r.account = v;
  } else if (opt == "--cpus-per-task") {
    r.cpus_per_task = static_cast<int>(to_int(v, "--cpus-per-task", kMaxCpusPerTask));
    if (*r.cpus_per_task < 1) bad("--cpus-per-task: must be at least 1");
  } else if (opt == "--ntasks") {
    r.ntasks = static_cast<int>(to_int(v, "--ntasks", kMaxNtasks));
    if (*r.ntasks < 1) bad("--ntasks: must be at least 1");
  } else if (opt == "--wait") {
    r.wait = true;
  } else if (opt == "--mail-type") {
    std::vector<std::string> ignored;
    r.mail_events = parse_mail_type(v, &ignored);
    for (const auto& type : ignored)
      r.warnings.push_back(fmt::format(
          "--mail-type {}: gpuq sends no such mail (it sends BEGIN, END, FAIL, REQUEUE and "
          "TIME_LIMIT[_90|_80|_50])",
          type));
  } else if (opt == "--mail-user") {
    r.mail_user = parse_mail_user(v);
  } else if (opt == "--export") {
    r.export_spec = v;
  } else if (opt == "--gpus-per-socket") {  // ignored, the job ran with no GPU
    bad(fmt::format("--gpus-per-socket {}: gpuq does not place GPUs by socket; ask for them with "
                    "--gpus N (or --gres=gpu:N)",
                    v));
  } else if (opt == "--open-mode") {
    if (v != "append" && v != "truncate")
      bad(fmt::format("--open-mode '{}': expected append or truncate", v));
    r.open_append = v == "append";
  }
}

// Edits (insert, delete, replace) between two option names, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The sbatch option a long name is one or two keystrokes away from ("--gress" -> "--gres"), if
// any: such a name is a typo, not another site's plugin option, and dropping it would lose what
// the job asked for (a --gres typo ran the job without its GPUs).
std::optional<std::string> near_option(const std::string& name) {
  if (name.rfind("--", 0) != 0 || name.size() < 5) return std::nullopt;
  std::optional<std::string> best;
  size_t best_d = 3;
  auto consider = [&](const std::string& known) {
    if (known.rfind("--", 0) != 0) return;
    const size_t d = edit_distance(name, known);
    if (d < best_d) best_d = d, best = known;
  };
  for (const auto& [known, _] : known_options()) consider(known);
  for (const auto& [known, _] : ignored_options()) consider(known);
  return best;
}

}  // namespace

std::vector<DirectiveLine> directive_lines(const std::string& script) {
  std::vector<DirectiveLine> out;
  size_t pos = 0;
  int number = 0;
  while (pos < script.size()) {
    size_t nl = script.find('\n', pos);
    std::string line = script.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? script.size() : nl + 1;
    if (++number == 1 && line.rfind("#!", 0) == 0) continue;
    size_t k = line.find_first_not_of(" \t\r");
    if (k == std::string::npos) continue;         // blank
    if (line[k] != '#') break;                    // first command: Slurm stops here
    if (line.rfind("#SBATCH", 0) != 0) continue;  // other comments, "# SBATCH" included
    std::string tail = line.substr(7);
    if (!tail.empty() && tail[0] != ' ' && tail[0] != '\t') continue;  // "#SBATCHX"
    out.push_back({number, std::move(tail)});
  }
  return out;
}

std::vector<std::string> sbatch_directive_words(const std::string& script) {
  std::vector<std::string> words;
  for (const auto& line : directive_lines(script))
    for (auto& w : split_words(line.tail)) words.push_back(std::move(w));
  return words;
}

JobRequest parse_sbatch_options(const std::vector<std::string>& words, size_t* first_positional,
                                UnknownOptions unknown) {
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
    if (ig == ignored_options().end()) {
      // Not an sbatch option gpuq knows of. On the command line that is an error, as in sbatch
      // (guessing its value took the script's name). In a directive, which holds options only,
      // a following word that is not an option is taken as its value.
      if (auto near = near_option(name))
        bad(fmt::format("unknown option '{}' (did you mean {}?)", w, *near));
      if (unknown == UnknownOptions::kRefuse)
        bad(fmt::format("unknown option '{}' (gpuq submit --help lists the options)", w));
      if (!has_value && i + 1 < words.size() && !words[i + 1].empty() && words[i + 1][0] != '-')
        ++i;
      r.warnings.push_back(fmt::format("unknown option '{}' ignored", w));
      continue;
    }
    if (ig->second && !has_value && i + 1 < words.size()) value = words[++i];
    r.warnings.push_back(fmt::format("unsupported option '{}' ignored", w));
  }
  if (first_positional) *first_positional = i;
  return r;
}

void require_batch_script(const std::string& script) {
  if (script.rfind("#!", 0) != 0)
    bad("this does not look like a batch script: the first line must start with #! followed by "
        "the path to an interpreter (e.g. #!/bin/bash)");
}

JobRequest parse_sbatch_script(const std::string& script) {
  JobRequest r;
  for (const auto& line : directive_lines(script)) {
    const std::string where = fmt::format("#SBATCH line {}", line.number);
    try {
      const auto words = split_words(line.tail);
      size_t pos = 0;
      JobRequest one = parse_sbatch_options(words, &pos);
      if (pos < words.size())
        bad(fmt::format("'{}' is not an option (directives take options only)", words[pos]));
      for (auto& w : one.warnings) w = where + ": " + w;
      r.merge_from(one);
    } catch (const std::invalid_argument& e) {
      bad(fmt::format("{}: {}", where, e.what()));
    }
  }
  return r;
}

}  // namespace gpurun::queue

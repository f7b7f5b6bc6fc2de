// output.cc: see output.h.
#include "supervisor/output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>

#include "gpurun/common/terminal.h"
#include "gpurun/launcher/error.h"
#include "sys/system.h"

namespace gpurun::launcher {

std::string LineForwarder::take_lines(std::string_view bytes, double now) {
  if (buf_.empty()) since_ = now;
  buf_.append(bytes);
  std::size_t end = buf_.rfind('\n');
  if (end == std::string::npos) return "";
  std::string lines = buf_.substr(0, end + 1);
  buf_.erase(0, end + 1);
  since_ = now;  // what is left began arriving now
  return lines;
}

std::optional<std::string> LineForwarder::take_partial(double older_than) {
  if (buf_.empty() || (since_ >= older_than && buf_.size() <= max_line_)) return std::nullopt;
  return take_partial_now();
}

std::optional<std::string> LineForwarder::take_partial_now() {
  if (buf_.empty()) return std::nullopt;
  std::string s;
  s.swap(buf_);
  return s;
}

std::optional<double> LineForwarder::partial_since() const {
  if (buf_.empty()) return std::nullopt;
  return since_;
}

namespace {

std::vector<std::string_view> split_lines_kept(std::string_view text) {
  std::vector<std::string_view> out;
  for (std::size_t b = 0; b < text.size();) {
    std::size_t e = text.find('\n', b);
    e = e == std::string_view::npos ? text.size() : e + 1;
    out.push_back(text.substr(b, e - b));
    b = e;
  }
  return out;
}

bool is_rule(std::string_view line) {
  return line.size() > 20 && line.find_first_not_of("-\n") == std::string_view::npos;
}

// Open MPI's help aggregation after an MPI_ABORT frame.
bool is_abort_aggregate(std::string_view line) {
  static const std::regex more(R"(^\[[^\]]+\] \d+ more process(es)? ha(s|ve) sent help message )"
                               R"(help-mpi-api\.txt / mpi-abort)");
  static const std::regex mca(R"(^\[[^\]]+\] Set MCA parameter "orte_base_help_aggregate")");
  // When every rank aborts at once, mpirun may fail to relay the frames themselves and say so
  // instead (the abort is then named by the rank's exit code).
  static const std::regex relay(
      R"(^\[[^\]]+\] \[\[\d+,\d+\],\d+\] ORTE_ERROR_LOG: .* in file .*show_help\.c at line \d+)");
  const std::string l(line);
  return std::regex_search(l, more) || std::regex_search(l, mca) || std::regex_search(l, relay);
}

}  // namespace

std::string take_abort_banners(std::string_view text, std::vector<AbortBanner>& found) {
  static const std::regex head(R"(^MPI_ABORT was invoked on rank (\d+) in communicator .*)");
  static const std::regex code(R"(^with errorcode (-?\d+)\.)");
  const std::vector<std::string_view> lines = split_lines_kept(text);
  std::string out;
  std::smatch m1, m2;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string l1 = i + 2 < lines.size() ? std::string(lines[i + 1]) : "";
    std::string l2 = i + 2 < lines.size() ? std::string(lines[i + 2]) : "";
    if (is_rule(lines[i]) && std::regex_search(l1, m1, head) && std::regex_search(l2, m2, code)) {
      std::size_t end = i + 3;
      while (end < lines.size() && end < i + 40 && !is_rule(lines[end])) ++end;
      if (end < lines.size() && is_rule(lines[end])) {
        found.push_back({std::stoi(m1[1].str().substr(0, 9)), std::stoi(m2[1].str().substr(0, 9))});
        i = end;
        continue;
      }
    }
    if (!is_abort_aggregate(lines[i])) out.append(lines[i]);
  }
  return out;
}

bool is_engine_echo(std::string_view line) {
  static const std::regex echo(
      R"(^(\d+: )?(slurmstepd(-\S+)?: error: \*\*\* STEP \S+ ON \S+ CANCELLED AT |)"
      R"(srun: Job step aborted: |srun: error: \S+: tasks? [0-9,-]+: (Killed|Terminated|Exited with )"
      R"(exit code \d+)|srun: launch/slurm: _step_signal: Terminating StepId=|)"
      R"(srun: forcing job termination))");
  return std::regex_search(std::string(line), echo);
}

OutputSink::OutputSink(bool tag, const std::optional<std::string>& dir, int world) : tag_(tag) {
  if (!dir) return;
  const std::error_code ec = sys::make_private_dirs(*dir);
  if (ec) throw Error(fmt::format("--output-dir {}: cannot create it: {}", *dir, ec.message()));
  auto open_file = [&](int rank, const char* ext) {
    std::string p = fmt::format("{}/rank-{}.{}", *dir, rank, ext);
    common::Fd fd(open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_APPEND | O_CLOEXEC,
                       sys::kPrivateFileMode));
    if (!fd) throw Error(fmt::format("--output-dir: cannot write {}: {}", p, strerror(errno)));
    return File{p, std::move(fd), ""};
  };
  for (int r = 0; r < world; ++r) {
    out_.push_back(open_file(r, "out"));
    err_.push_back(open_file(r, "err"));
  }
}

void OutputSink::write_file(File& f, int rank, std::string_view text) {
  if (!text.empty()) f.line_start = text.back() == '\n';
  if (!f.fd || common::write_all(f.fd.get(), text)) return;
  f.error = strerror(errno);
  f.fd.reset();
  fmt::print(stderr,
             "gpurun: --output-dir: writing {} failed: {}; rank {}'s output goes on only "
             "to the terminal\n",
             common::escape_control(f.path), f.error, rank);
}

void OutputSink::mark_attempt(int attempt) {
  for (auto* files : {&out_, &err_})
    for (std::size_t r = 0; r < files->size(); ++r) {
      File& f = (*files)[r];
      write_file(f, static_cast<int>(r),
                 fmt::format("{}==> attempt {} <==\n", f.line_start ? "" : "\n", attempt));
    }
}

std::string OutputSink::failed_files() const {
  std::string s;
  for (const auto* files : {&out_, &err_})
    for (const auto& f : *files)
      if (!f.error.empty()) s += fmt::format("{}{} ({})", s.empty() ? "" : ", ", f.path, f.error);
  return s;
}

void OutputSink::write(int rank, int stream, bool partial, std::string_view text_in,
                       std::optional<std::string_view> terminal) {
  auto& files = stream == 2 ? err_ : out_;
  if (static_cast<std::size_t>(rank) < files.size()) write_file(files[rank], rank, text_in);
  const std::string_view text = terminal ? *terminal : text_in;
  if (text.empty()) return;
  std::string shown;
  if (tag_) {
    std::string prefix = fmt::format("{}: ", rank);
    shown.reserve(text.size() + prefix.size() * 4);
    std::size_t b = 0;
    while (b < text.size()) {
      std::size_t e = text.find('\n', b);
      e = e == std::string_view::npos ? text.size() : e + 1;
      shown += prefix;
      shown.append(text.substr(b, e - b));
      b = e;
    }
  } else {
    shown.assign(text);
  }
  if (partial || (!shown.empty() && shown.back() != '\n')) shown += '\n';
  // One write per message: whole lines of one rank are never cut by another's.
  common::write_all(stream == 2 ? STDERR_FILENO : STDOUT_FILENO, shown);
}

}  // namespace gpurun::launcher

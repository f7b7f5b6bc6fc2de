// output.h: ranks' output, whole lines at a time, so that the merged stream never splits or glues
// lines between ranks (engines forward output in chunks that cut lines anywhere).
//
// The wrapper reads its program's stdout and stderr from pipes and forwards whole lines to gpurun
// over the control connection (a line left unfinished goes after kPartialDelay, or at exit);
// gpurun writes each message with one write, prefixed with the rank under --tag-output, and
// also appends it to DIR/rank-N.out / DIR/rank-N.err under --output-dir. Private.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpurun/common/posix.h"

namespace gpurun::launcher {

constexpr double kPartialDelay = 0.5;  // seconds an unfinished line waits for its end

// One stream of the wrapper's program (stdout or stderr), cut into whole lines.
class LineForwarder {
 public:
  explicit LineForwarder(std::size_t max_line = 1 << 20) : max_line_(max_line) {}
  // Takes bytes read at time `now`; returns the whole lines among what arrived so far (with
  // their '\n'), or "" when there is none.
  std::string take_lines(std::string_view bytes, double now);
  // The unfinished line, if it waited since before `older_than` or outgrew max_line.
  std::optional<std::string> take_partial(double older_than);
  // The unfinished line whatever its age (the program ended).
  std::optional<std::string> take_partial_now();
  // When the unfinished line started; nullopt when there is none.
  std::optional<double> partial_since() const;

 private:
  std::string buf_;
  double since_ = 0;
  std::size_t max_line_;
};

// Open MPI's MPI_ABORT report: a frame of dashes around "MPI_ABORT was invoked on rank R in
// communicator C / with errorcode E." and a note, printed by every rank that aborts where no mpirun
// gathers them (srun, gpurun's own fork), else once by mpirun followed by "[host:pid] N more
// processes have sent help message ... mpi-abort" and "Set MCA parameter ...". gpurun names the
// abort itself, in one line, so these are taken out of what reaches the terminal.
struct AbortBanner {
  int rank;  // as the banner says (the MPI world rank; a fork's rank is a world of one)
  int errorcode;
};
// `lines` (whole lines) without the MPI_ABORT frames and the help-aggregation lines about them;
// each frame's rank and code appended to `found`.
std::string take_abort_banners(std::string_view lines, std::vector<AbortBanner>& found);
// Whether an engine's line only repeats the end of a job gpurun has already named: srun's report
// of the step it was told to end ("srun: error: node1: tasks 0-1: Killed", "*** STEP 7.0 ON
// node1 CANCELLED AT ...", "srun: Job step aborted: ..."), also after srun's "N: " label.
bool is_engine_echo(std::string_view line);

// gpurun's side: the terminal (its own stdout/stderr) and the --output-dir files.
class OutputSink {
 public:
  // Creates `dir` and truncates rank-N.out / rank-N.err for every rank; throws Error naming it.
  OutputSink(bool tag, const std::optional<std::string>& dir, int world);
  // `text`: whole lines, or an unfinished one (partial), which ends the terminal line with '\n'
  // (so the next rank's line starts on its own) but goes to the rank's file as it is. A rank file
  // that cannot be written (a full disk) is said at once and then left: its output goes on only
  // to the terminal.
  // `shown`, when given, goes to the terminal instead of `text` (the files keep every byte).
  void write(int rank, int stream, bool partial, std::string_view text,
             std::optional<std::string_view> shown = std::nullopt);
  // "rank-1.out (No space left on device), ..." for the files writing stopped, or "".
  std::string failed_files() const;
  // Starts attempt `attempt` (1, 2, ...) in every file with a line "==> attempt K <==" (on a line
  // of its own, after an unfinished last line), as tail(1) marks files: --max-restarts appends
  // the attempts to the same files.
  void mark_attempt(int attempt);

 private:
  struct File {
    std::string path;
    common::Fd fd;
    std::string error;       // why writing it stopped
    bool line_start = true;  // its last byte was a newline, or it is empty
  };
  void write_file(File& f, int rank, std::string_view text);
  bool tag_;
  std::vector<File> out_, err_;
};

}  // namespace gpurun::launcher

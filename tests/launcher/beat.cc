// beat.cc: a stand-in rank for gpurun's hang, restart and output tests (built as `beat`, and as
// `beat_mpi` with an MPI_Allreduce every step).
//
//   beat [--steps N] [--interval-ms MS] [--hang-rank R --hang-step S
//        --hang stop|sleep|exit|abort|kill [--on-attempt K]] [--lines N --line-bytes B]
//
// Each step it writes the step number to $GPURUN_HEARTBEAT (the contract of
// launcher/src/wrapper/rank_folder.h: decimal at offset 0, fixed width), then (beat_mpi) joins an
// MPI_Allreduce, then sleeps MS. Rank R, on reaching step S, hangs before beating it: `stop`
// sends itself SIGSTOP, `sleep` sleeps in nanosleep forever, `exit` exits 3 (a failure). So the
// other ranks of beat_mpi wait in MPI_Allreduce one step ahead of it; `abort` (beat_mpi) calls
// MPI_Abort with errorcode 5, as a program does on a configuration error (--hang-rank all: every
// rank does). --on-attempt K: only when
// GPURUN_RESTART_COUNT is K (a failure that a restart cures).
// --lines: instead, each rank prints N lines of B bytes as fast as it can, each line in three
// write() calls (so an engine that forwards chunks would cut them), the odd ones to stderr,
// then "done RANK" without a newline.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#ifdef BEAT_MPI
#include <mpi.h>
#endif

namespace {

constexpr long kEveryRank = -2;  // --hang-rank all

struct Args {
  long steps = 1000000, interval_ms = 100, hang_rank = -1, hang_step = -1, on_attempt = -1;
  std::string hang = "stop";
  long lines = 0, line_bytes = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--steps")
      a.steps = std::atol(v);
    else if (k == "--interval-ms")
      a.interval_ms = std::atol(v);
    else if (k == "--hang-rank")
      a.hang_rank = std::string(v) == "all" ? kEveryRank : std::atol(v);
    else if (k == "--hang-step")
      a.hang_step = std::atol(v);
    else if (k == "--hang")
      a.hang = v;
    else if (k == "--on-attempt")
      a.on_attempt = std::atol(v);
    else if (k == "--lines")
      a.lines = std::atol(v);
    else if (k == "--line-bytes")
      a.line_bytes = std::atol(v);
    else {
      std::fprintf(stderr, "beat: unknown option %s\n", argv[i]);
      std::exit(2);
    }
  }
  return a;
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) std::exit(4);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void print_lines(const Args& a, long rank) {
  std::string payload(static_cast<size_t>(a.line_bytes), static_cast<char>('a' + rank % 26));
  for (long i = 0; i < a.lines; ++i) {
    int fd = i % 2 ? 2 : 1;
    std::string head = std::to_string(rank) + ":" + std::to_string(i) + ":";
    write_all(fd, head.data(), head.size());
    write_all(fd, payload.data(), payload.size() / 2);
    std::string tail = payload.substr(payload.size() / 2) + "\n";
    write_all(fd, tail.data(), tail.size());
  }
  std::string done = "done " + std::to_string(rank);
  write_all(1, done.data(), done.size());
}

void hang(const std::string& how) {
  if (how == "exit") std::exit(3);
#ifdef BEAT_MPI
  if (how == "abort") MPI_Abort(MPI_COMM_WORLD, 5);
#endif
  if (how == "stop") raise(SIGSTOP);
  if (how == "kill") raise(SIGKILL);  // as the OOM killer, or a node that goes
  for (;;) {
    timespec t{3600, 0};
    nanosleep(&t, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  long rank = std::atol(std::getenv("RANK") ? std::getenv("RANK") : "0");
  const char* attempt = std::getenv("GPURUN_RESTART_COUNT");
  if (a.on_attempt >= 0 && std::atol(attempt ? attempt : "0") != a.on_attempt) a.hang_rank = -1;
#ifdef BEAT_MPI
  MPI_Init(&argc, &argv);
#endif
  if (a.lines > 0) {
    print_lines(a, rank);
    return 0;
  }
  const char* hb = std::getenv("GPURUN_HEARTBEAT");
  int fd = hb ? open(hb, O_WRONLY | O_CLOEXEC) : -1;
  for (long step = 0; step < a.steps; ++step) {
    if ((rank == a.hang_rank || a.hang_rank == kEveryRank) && step == a.hang_step) hang(a.hang);
    if (fd >= 0) {
      char field[24];
      int n = std::snprintf(field, sizeof field, "%-20ld\n", step);
      if (pwrite(fd, field, static_cast<size_t>(n), 0) != n) return 5;
    }
#ifdef BEAT_MPI
    long one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
#endif
    timespec t{a.interval_ms / 1000, (a.interval_ms % 1000) * 1000000};
    nanosleep(&t, nullptr);
  }
#ifdef BEAT_MPI
  MPI_Finalize();
#endif
  return 0;
}

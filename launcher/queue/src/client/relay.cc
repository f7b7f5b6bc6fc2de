// gpuq run's side of a running interactive job (relay.h).
#include "client/relay.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "supervise/attach.h"

namespace gpurun::queue {

namespace {

constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
// After the caller's terminal hangs up, how long the job has to end on the SIGHUP it was sent
// before gpuq run leaves, which cancels the job (a shell saves its history; nohup ignores it).
constexpr int kHangupGraceMs = 5000;

// A time `ms` from its making, on the monotonic clock.
class Deadline {
 public:
  explicit Deadline(int ms) : at_(Clock::now() + std::chrono::milliseconds(ms)) {}
  bool passed() const { return Clock::now() >= at_; }
  int left_ms() const {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::max<int64_t>(0, left));
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point at_;
};

enum class Pumped { ok, input_ended, output_failed };

// Copies what `from` has to `to`. input_ended at end of input: a terminal that hung up, or one
// whose job side is all closed, reads EIO (or 0 in raw mode).
Pumped pump(int from, int to) {
  char buf[16384];
  ssize_t n = ::read(from, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return Pumped::ok;
  if (n <= 0) return Pumped::input_ended;
  return common::write_all(to, std::string_view(buf, static_cast<size_t>(n)))
             ? Pumped::ok
             : Pumped::output_failed;
}

void copy_window_size(int to) {
  winsize ws{};
  if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0) ioctl(to, TIOCSWINSZ, &ws);
}

// What the job wrote before it ended, still in the terminal's buffer.
void drain(int master) {
  pollfd p{master, POLLIN, 0};
  while (::poll(&p, 1, 100) > 0 && (p.revents & POLLIN) &&
         pump(master, STDOUT_FILENO) == Pumped::ok) {
  }
}

// "EXIT code sig" -> the status a shell shows; nullopt for any other line.
std::optional<int> exit_status(const std::string& line) {
  int code = 0, sig = 0;
  char tail = 0;
  if (std::sscanf(line.c_str(), "EXIT %d %d%c", &code, &sig, &tail) != 2) return std::nullopt;
  return sig ? 128 + sig : code;
}

}  // namespace

Fd block_client_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kHandled) sigaddset(&set, sig);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  Fd fd(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd) throw std::runtime_error(fmt::format("signalfd: {}", strerror(errno)));
  return fd;
}

Pty open_pty() {
  Pty p;
  p.master = Fd(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  char name[128];
  if (!p.master || grantpt(p.master.get()) != 0 || unlockpt(p.master.get()) != 0 ||
      ptsname_r(p.master.get(), name, sizeof(name)) != 0)
    throw std::runtime_error(fmt::format("cannot open a pseudo-terminal: {}", strerror(errno)));
  p.slave = Fd(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.slave) throw std::runtime_error(fmt::format("open {}: {}", name, strerror(errno)));
  termios modes{};
  if (tcgetattr(STDIN_FILENO, &modes) == 0) tcsetattr(p.slave.get(), TCSANOW, &modes);
  copy_window_size(p.slave.get());
  return p;
}

struct RawTerminal::State {
  termios modes;
};

RawTerminal::RawTerminal() {
  termios modes{};
  if (tcgetattr(STDIN_FILENO, &modes) != 0) return;
  saved_ = new State{modes};
  cfmakeraw(&modes);
  // TCSADRAIN, not TCSAFLUSH: what the user typed while the job waited in the queue is kept and
  // reaches the job's terminal, as ssh keeps type-ahead (a flush dropped the first command).
  active_ = tcsetattr(STDIN_FILENO, TCSADRAIN, &modes) == 0;
}

RawTerminal::~RawTerminal() {
  if (active_) tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_->modes);
  delete saved_;
}

std::optional<int> relay_session(int sock, int sigfd, int master) {
  LineReader from_job(sock);
  bool stdin_open = master >= 0, master_open = master >= 0;
  std::optional<Deadline> hung_up;  // the caller's terminal is gone: the job's grace
  bool hup_sent = false;             // a terminal's hang-up reaches the job once
  while (true) {
    std::vector<pollfd> fds{{sock, POLLIN, 0}, {sigfd, POLLIN, 0}};
    if (stdin_open) fds.push_back({STDIN_FILENO, POLLIN, 0});
    if (master_open) fds.push_back({master, POLLIN, 0});
    if (hung_up && hung_up->passed()) return 128 + SIGHUP;  // leaving cancels the job
    if (::poll(fds.data(), fds.size(), hung_up ? hung_up->left_ms() : -1) < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("poll: {}", strerror(errno)));
    signalfd_siginfo si{};
    while (::read(sigfd, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
      if (si.ssi_signo == SIGWINCH && master >= 0)
        copy_window_size(master);
      else if (si.ssi_signo != SIGWINCH && !(si.ssi_signo == SIGHUP && hup_sent))
        send_line(sock, fmt::format("SIG {}\n", si.ssi_signo));
      hup_sent = hup_sent || si.ssi_signo == SIGHUP;
    }
    for (const pollfd& p : fds) {
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR)) || p.fd == sock || p.fd == sigfd) continue;
      if (p.fd == STDIN_FILENO) {
        const Pumped in = pump(STDIN_FILENO, master);
        stdin_open = in == Pumped::ok;
        // The caller's terminal hung up (closed without a SIGHUP reaching gpuq run, which is in
        // a session of its own under su -c or setsid): the job gets the hang-up it would get
        // from a terminal of its own.
        if (in == Pumped::input_ended && !hung_up) {
          if (!hup_sent) send_line(sock, fmt::format("SIG {}\n", SIGHUP));  // once
          hup_sent = true;
          hung_up.emplace(kHangupGraceMs);
        }
      }
      if (p.fd == master) master_open = pump(master, STDOUT_FILENO) == Pumped::ok;
    }
    std::vector<std::string> lines;
    const bool alive = from_job.poll_lines(&lines);
    for (const auto& line : lines)
      if (auto status = exit_status(line)) {
        if (master_open) drain(master);
        return status;
      }
    if (!alive) return std::nullopt;
  }
}

}  // namespace gpurun::queue

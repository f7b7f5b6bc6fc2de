// posix.h: POSIX helpers shared by the launcher, the queue and the runtime. Each exists once,
// here: an owning file descriptor, signal names both ways, writes that finish or say why, a
// whole-file read, the host name, and what names a process for a whole boot.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpurun::common {

// An owned file descriptor: closed when the owner goes, moved but never copied.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// "SIGUSR1" for SIGUSR1; "SIG40" for a number without a name (real-time signals).
std::string signal_name(int sig);
// "USR1", "usr1", "SIGUSR1" or "10" -> SIGUSR1; nullopt for anything else (0, 65, "NOPE").
std::optional<int> parse_signal(std::string_view text);
// Whether `n` is a signal number (1 to 64): checked before a number from outside becomes an int
// signal (a wire message, a status file), so nothing wraps past the check.
bool is_signal_number(long long n);

// Writes all of `data` to fd, retrying after EINTR and short writes. On a socket it never raises
// SIGPIPE. Returns false with errno set when the descriptor fails (a peer that went away).
bool write_all(int fd, std::string_view data);

// The whole file, or nullopt when it cannot be opened or read.
std::optional<std::string> read_file(const std::string& path);

// The names in folder `dir`, without "." and "..", in readdir's order; nullopt (errno set) when
// it cannot be opened.
std::optional<std::vector<std::string>> list_dir(const std::string& dir);

// This machine's host name ("localhost" if gethostname fails).
std::string hostname();

// When process `pid` started (field 22 of /proc/PID/stat: clock ticks after boot), or nullopt when
// there is no such process. A pid is reused; the pair (pid, start time) names one process for the
// whole boot, so a file that records both can tell whether its owner still lives.
std::optional<std::uint64_t> process_start_time(long pid);
// This boot's id (/proc/sys/kernel/random/boot_id, without the newline), "" when unreadable.
std::string boot_id();

// A user's passwd entry, looked up by uid or by name (getpwuid_r/getpwnam_r: safe beside other
// threads); nullopt when there is none.
struct PasswdEntry {
  std::string name;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
};
std::optional<PasswdEntry> passwd_entry(std::uint32_t uid);
std::optional<PasswdEntry> passwd_entry(const std::string& name);

}  // namespace gpurun::common

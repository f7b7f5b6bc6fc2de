// posix.cc: the shared POSIX helpers (posix.h).
#include "gpurun/common/posix.h"

#include <dirent.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <fstream>
#include <memory>
#include <sstream>

namespace gpurun::common {
namespace {

struct NamedSignal {
  const char* name;  // without "SIG"
  int number;
};

constexpr std::array<NamedSignal, 22> kSignals = {{
    {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1},
    {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},   {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"URG", SIGURG},
    {"XCPU", SIGXCPU}, {"WINCH", SIGWINCH},
}};

constexpr int kMaxSignal = 64;

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

Fd::~Fd() {
  reset();
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string signal_name(int sig) {
  for (const NamedSignal& s : kSignals) {
    if (s.number == sig) return std::string("SIG") + s.name;
  }
  return "SIG" + std::to_string(sig);
}

bool is_signal_number(long long n) {
  return n >= 1 && n <= kMaxSignal;
}

std::optional<int> parse_signal(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (text.find_first_not_of("0123456789") == std::string_view::npos) {
    if (text.size() > 2) return std::nullopt;
    const int n = std::stoi(std::string(text));
    if (!is_signal_number(n)) return std::nullopt;
    return n;
  }
  std::string upper(text);
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("SIG", 0) == 0) upper.erase(0, 3);
  for (const NamedSignal& s : kSignals) {
    if (upper == s.name) return s.number;
  }
  return std::nullopt;
}

bool write_all(int fd, std::string_view data) {
  bool socket = true;
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = socket ? ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL) : -1;
    if (n < 0 && socket && errno == ENOTSOCK) {
      socket = false;
      continue;
    }
    if (!socket) n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    off += std::size_t(n);
  }
  return true;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return std::nullopt;
  return ss.str();
}

std::optional<std::vector<std::string>> list_dir(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return std::nullopt;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  return names;
}

std::string hostname() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "localhost";
  return buf.data();
}

std::optional<std::uint64_t> process_start_time(long pid) {
  if (pid <= 0) return std::nullopt;
  const auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold blanks and parentheses, so count fields from the
  // last ')'. The field after it is the 3rd (state); starttime is the 22nd.
  const std::size_t close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(stat->substr(close + 1));
  std::string field;
  for (int i = 3; i < 22 && (in >> field); ++i) {
  }
  std::uint64_t start = 0;
  if (!(in >> start)) return std::nullopt;
  return start;
}

std::string boot_id() {
  const auto id = read_file("/proc/sys/kernel/random/boot_id");
  return id ? id->substr(0, id->find('\n')) : "";
}

namespace {

// getpw*_r with a buffer that grows until the entry fits (ERANGE).
template <typename Lookup>
std::optional<PasswdEntry> lookup_passwd(Lookup lookup) {
  std::vector<char> buf(4096);
  for (;;) {
    passwd pw{};
    passwd* found = nullptr;
    const int rc = lookup(&pw, buf.data(), buf.size(), &found);
    if (rc == ERANGE && buf.size() < (1u << 20)) {
      buf.resize(buf.size() * 4);
      continue;
    }
    if (rc != 0 || !found) return std::nullopt;
    return PasswdEntry{pw.pw_name, pw.pw_uid, pw.pw_gid};
  }
}

}  // namespace

std::optional<PasswdEntry> passwd_entry(std::uint32_t uid) {
  return lookup_passwd([uid](passwd* pw, char* buf, size_t len, passwd** found) {
    return getpwuid_r(uid, pw, buf, len, found);
  });
}

std::optional<PasswdEntry> passwd_entry(const std::string& name) {
  return lookup_passwd([&name](passwd* pw, char* buf, size_t len, passwd** found) {
    return getpwnam_r(name.c_str(), pw, buf, len, found);
  });
}

}  // namespace gpurun::common

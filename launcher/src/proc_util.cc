// proc_util.cc: see proc_util.h.
#include "proc_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace gpurun::launcher::proc {
namespace {
int g_sig_write = -1;

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  if (g_sig_write >= 0) (void)!write(g_sig_write, &b, 1);
  errno = saved;
}
}  // namespace

int install_signal_pipe(const std::vector<int>& signals) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  g_sig_write = fds[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : signals) sigaction(s, &sa, nullptr);
  return fds[0];
}

std::vector<int> drain_signals(int fd) {
  std::vector<int> out;
  unsigned char buf[64];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; ++i) out.push_back(buf[i]);
  return out;
}

void restore_default_signals(const std::vector<int>& signals) {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int s : signals) sigaction(s, &sa, nullptr);
}

bool read_lines(int fd, std::string& buf, std::vector<std::string>& lines) {
  char tmp[4096];
  ssize_t n = read(fd, tmp, sizeof tmp);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n <= 0) return false;
  buf.append(tmp, static_cast<std::size_t>(n));
  std::size_t nl;
  while ((nl = buf.find('\n')) != std::string::npos) {
    lines.push_back(buf.substr(0, nl));
    buf.erase(0, nl + 1);
  }
  // A peer that sends a huge line without a newline is not one of ours.
  if (buf.size() > 65536) return false;
  return true;
}

std::vector<std::string> env_strings(const Env& env) {
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

void exec_program(const std::vector<std::string>& argv, const Env& env) {
  std::vector<std::string> es = env_strings(env);
  std::vector<char*> ev, av;
  for (auto& s : es) ev.push_back(s.data());
  ev.push_back(nullptr);
  std::vector<std::string> args = argv;
  for (auto& s : args) av.push_back(s.data());
  av.push_back(nullptr);
  // execvpe searches PATH from the *calling* environment; set it to the child's first.
  auto it = env.find("PATH");
  if (it != env.end()) setenv("PATH", it->second.c_str(), 1);
  execvpe(av[0], av.data(), ev.data());
  int e = errno;
  fprintf(stderr, "gpurun: cannot run '%s': %s\n", argv[0].c_str(), strerror(e));
  _exit(e == ENOENT ? 127 : 126);
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string random_token() {
  unsigned char b[16] = {};
  std::ifstream f("/dev/urandom", std::ios::binary);
  f.read(reinterpret_cast<char*>(b), sizeof b);
  std::string s;
  char hex[3];
  for (unsigned char c : b) {
    snprintf(hex, sizeof hex, "%02x", c);
    s += hex;
  }
  return s;
}

}  // namespace gpurun::launcher::proc

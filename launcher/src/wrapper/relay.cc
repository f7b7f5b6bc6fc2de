// relay.cc: a node's control relay (relay.h): joining or forking it, and its event loop.
#include "wrapper/relay.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "control/control.h"
#include "gpurun/launcher/launch.h"
#include "sys/net.h"
#include "sys/proc_util.h"

namespace gpurun::launcher::relay {
namespace {

constexpr double kConnectTimeout = 20.0;  // to gpurun, as a wrapper's own connection
constexpr double kIdleEnd = 2.0;          // with no rank left, before ending when not all came
constexpr int kBacklog = 512;
constexpr std::size_t kMaxMessage = 16 << 20;  // a STACKS message of many threads
enum : std::uint64_t { kListenerKey, kUpstreamKey, kFirstLocalKey };

sockaddr_un address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, name.data(), std::min(name.size(), sizeof a.sun_path - 1));
  if (name[0] == '@') a.sun_path[0] = '\0';  // abstract
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  return a;
}

class Relay {
 public:
  Relay(common::Fd listener, Target t) : listener_(std::move(listener)), t_(std::move(t)) {}
  int run();

 private:
  struct Local {
    common::Fd fd;
    proc::LineReader in{kMaxMessage};
    int rank = -1;  // from its HELLO
  };
  void watch(int fd, std::uint64_t key);
  void on_accept();
  void on_local(std::size_t i);
  bool on_upstream();
  void close_local(std::size_t i);
  bool done() const;

  common::Fd listener_, up_, ep_;
  Target t_;
  proc::LineReader up_in_{kMaxMessage};
  std::vector<Local> locals_;
  std::unordered_map<int, std::size_t> local_of_rank_;
  std::string out_;  // for gpurun: what this wake read from the wrappers, written at once
  int open_ = 0, seen_ = 0;
  double idle_since_ = 0;
};

void Relay::watch(int fd, std::uint64_t key) {
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u64 = key;
  if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &e) != 0)
    throw Error(fmt::format("control relay of {}: epoll_ctl: {}", t_.node, std::strerror(errno)));
}

void Relay::on_accept() {
  int fd;
  while ((fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC)) >= 0) {
    // An abstract socket has no file mode: anyone on the node can connect. Only this user's
    // processes are served (and each must then show the launch's token).
    ucred peer{};
    socklen_t len = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != getuid()) {
      close(fd);
      continue;
    }
    locals_.push_back(Local{common::Fd(fd)});
    watch(fd, kFirstLocalKey + locals_.size() - 1);
    ++open_;
    ++seen_;
  }
}

// A wrapper's lines go up framed with its rank; its first must be its HELLO.
void Relay::on_local(std::size_t i) {
  Local& l = locals_[i];
  if (!l.fd) return;
  std::vector<std::string> lines;
  auto state = l.in.read_from(l.fd.get(), lines);
  for (const auto& line : lines) {
    if (l.rank < 0) {
      auto m = control::parse_to_supervisor(line);
      const auto* h = m ? std::get_if<control::Hello>(&*m) : nullptr;
      if (!h || h->token != t_.token || h->rank < 0 || local_of_rank_.count(h->rank)) {
        state = proc::LineReader::State::closed;  // not a wrapper of this node's
        break;
      }
      l.rank = h->rank;
      local_of_rank_[l.rank] = i;
    }
    out_ += control::frame(l.rank, line + "\n");
  }
  if (state != proc::LineReader::State::open) close_local(i);
}

void Relay::close_local(std::size_t i) {
  Local& l = locals_[i];
  if (!l.fd) return;
  if (l.rank >= 0) {
    out_ += control::frame(l.rank, std::string(control::kClosed) + "\n");
    local_of_rank_.erase(l.rank);
  }
  epoll_ctl(ep_.get(), EPOLL_CTL_DEL, l.fd.get(), nullptr);
  l.fd.reset();
  if (--open_ == 0) idle_since_ = proc::now_seconds();
}

// gpurun's lines go down to their rank's wrapper, unframed; false once gpurun closed.
bool Relay::on_upstream() {
  std::vector<std::string> lines;
  auto state = up_in_.read_from(up_.get(), lines);
  for (const auto& line : lines) {
    auto f = control::parse_frame(line);
    auto it = f ? local_of_rank_.find(f->rank) : local_of_rank_.end();
    if (it == local_of_rank_.end()) continue;
    if (f->body == control::kClosed)
      close_local(it->second);
    else  // a wrapper that died meanwhile: its end comes through epoll
      common::write_all(locals_[it->second].fd.get(), std::string(f->body) + "\n");
  }
  return state == proc::LineReader::State::open;
}

bool Relay::done() const {
  if (open_ > 0 || seen_ == 0) return false;
  return seen_ >= t_.local_ranks || proc::now_seconds() - idle_since_ >= kIdleEnd;
}

int Relay::run() {
  up_ = net::connect_tcp(t_.host, t_.port, kConnectTimeout,
                         fmt::format("the control relay of node {}", t_.node));
  net::no_delay(up_.get());
  if (!common::write_all(up_.get(),
                         control::encode(control::RelayHello{t_.token, t_.node, getpid()})))
    return 1;
  fcntl(listener_.get(), F_SETFL, O_NONBLOCK);
  ep_.reset(epoll_create1(EPOLL_CLOEXEC));
  watch(listener_.get(), kListenerKey);
  watch(up_.get(), kUpstreamKey);
  std::vector<epoll_event> evs(256);
  while (!done()) {
    int n = epoll_wait(ep_.get(), evs.data(), static_cast<int>(evs.size()), open_ ? -1 : 200);
    for (int k = 0; k < n; ++k) {
      const std::uint64_t key = evs[static_cast<std::size_t>(k)].data.u64;
      if (key == kListenerKey)
        on_accept();
      else if (key == kUpstreamKey && !on_upstream())
        return 0;  // gpurun closed: the wrappers see their connections close with ours
      else if (key >= kFirstLocalKey)
        on_local(key - kFirstLocalKey);
    }
    if (!out_.empty() && !common::write_all(up_.get(), out_)) return 1;
    out_.clear();
  }
  return 0;
}

// The child ignores what a wrapper forwards (see relay.h) and dies with its parent.
pid_t fork_relay(common::Fd listener, const Target& t) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0)
    throw Error(
        fmt::format("cannot fork the control relay of node {}: {}", t.node, std::strerror(errno)));
  if (pid > 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  prctl(PR_SET_NAME, "gpurun-relay");  // what ps and top show (comm)
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE})
    signal(sig, SIG_IGN);
  signal(SIGCHLD, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int status = 1;
  try {
    status = Relay(std::move(listener), t).run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpurun: {}\n", e.what());
  }
  _exit(status);
}

}  // namespace

std::optional<Joined> join(const Target& t, double timeout_s) {
  socklen_t len = 0;
  const sockaddr_un a = address(control::relay_socket_name(t.token, t.node), len);
  const auto* sa = reinterpret_cast<const sockaddr*>(&a);
  const double deadline = proc::now_seconds() + timeout_s;
  pid_t forked = -1;
  while (true) {
    common::Fd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s) return std::nullopt;
    if (connect(s.get(), sa, len) == 0) return Joined{std::move(s), forked};
    const bool absent = errno == ECONNREFUSED || errno == ENOENT || errno == EAGAIN;
    if (!absent && forked < 0) return std::nullopt;  // no Unix sockets here (a seccomp profile)
    if (forked < 0) {
      common::Fd l(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (bind(l.get(), sa, len) == 0 && listen(l.get(), kBacklog) == 0) {
        forked = fork_relay(std::move(l), t);
        continue;
      }
      if (errno != EADDRINUSE) return std::nullopt;
    }
    if (proc::now_seconds() > deadline)
      throw Error(fmt::format("no control relay answered on node {} within {:.0f} s ({})", t.node,
                              timeout_s, std::strerror(errno)));
    poll(nullptr, 0, 5);
  }
}

void wait_for(pid_t relay) {
  int st = 0;
  while (relay > 0 && waitpid(relay, &st, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace gpurun::launcher::relay

// control_plane.cc: how gpurun's control plane scales (issue 11, item 8; issue 32, item 3). Run:
//
//   build/bench/control_plane/bench_control_plane build/launcher/gpurun [N | NODESxRANKS ...]
//
// For each shape (default 64 256 1024 4096 512x8 16384x8) it starts the real gpurun
// (`-n RANKS --launcher mpirun`) with this program standing in for mpirun (a symlink named mpirun
// first on PATH): a simulated engine in one process, speaking launcher/src/control/control.h as
// the wrappers do. "N" is N ranks on a connection each (wrappers without a relay: HELLO; rank 0
// holds the rendezvous port; every rank connects to it as its reach check; RUNNING once GO
// arrives). "NODESxRANKS" is NODES connections, each a node relay carrying RANKS ranks (RELAY,
// then every line framed with its rank; one write per connection per wake, as the relay does);
// each node connects from its own loopback address and checks its reach once for its ranks, as
// a real node does (see bench/results/control_plane.md). It measures
//   ready: from the engine's start until all ranks got GO (every program would start now), and
//          the same from gpurun's start;
//   stop:  from one rank's EXIT 1 until all the others got STOP;
//   exit:  from that EXIT until gpurun itself exited.
// Targets: 131,072 ranks (16384x8) ready in <= 5 s, all stopped <= 1 s after one fails; 4,096
// ranks no worse than before the relays (ready 0.59-0.68 s, stop 0.07-0.08 s on this machine).
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/control.h"
#include "sys/net.h"
#include "sys/proc_util.h"

namespace gpurun::launcher::bench {
namespace {

using proc::now_seconds;

void raise_fd_limit() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
}

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// `node` >= 0: from that simulated node's own address, 127.1.0.0 + node + 1, as a real node
// connects from its own: one host's connections to one port from one address cost the kernel a
// search of the ports in use at every connect (__inet_hash_connect), which real nodes never pay.
int connect_nb(int port, int node = -1) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  if (fd >= 0 && node >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in src = loopback(0);
    src.sin_addr.s_addr = htonl(0x7f010000u + static_cast<uint32_t>(node) + 1);
    if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      fmt::print(stderr, "sim: bind to node {}'s address: {}\n", node, strerror(errno));
      std::exit(3);
    }
  }
  if (fd < 0 ||
      (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS)) {
    fmt::print(stderr, "sim: connect to {}: {}\n", port, strerror(errno));
    std::exit(3);
  }
  net::no_delay(fd);  // as the wrapper's connection
  return fd;
}

// The simulated engine: N ranks in one process, over one connection each (as wrappers without
// a relay) or over one connection per node of K ranks (as node relays, control.h's framing).
class Engine {
 public:
  Engine(int n, int per_node, int ctl_port, std::string token)
      : n_(n), per_node_(per_node), ctl_port_(ctl_port), token_(std::move(token)) {}
  int run(const std::string& result_file);

 private:
  struct Conn {
    int fd = -1;
    proc::LineReader in;
    bool hello = false;
    int first = 0, ranks = 1, byes = 0;  // the ranks it carries: first .. first + ranks - 1
    int probe = -1;                      // its reach check (one per connection)
    bool reached = false;
    std::vector<int> waiting;  // ranks that got RENDEZVOUS before the reach check ended
    std::string out;           // written once a wake, as a relay does
  };
  struct Rank {
    bool go = false, stopped = false;
  };
  bool relayed() const { return per_node_ > 1; }
  // A relay connects from its node's own address; per-rank rows keep today's (one address).
  int node_address(std::size_t ci) const { return relayed() ? static_cast<int>(ci) : -1; }
  Conn& conn_of(int r) { return conns_[static_cast<std::size_t>(r / per_node_)]; }
  void watch(int fd, std::uint32_t ev, std::uint64_t key, int op = EPOLL_CTL_ADD) {
    epoll_event e{ev, {}};
    e.data.u64 = key;
    epoll_ctl(ep_, op, fd, &e);
  }
  void send(int r, const control::ToSupervisor& m) {
    Conn& c = conn_of(r);
    const std::string line = control::encode(m);
    c.out += relayed() ? control::frame(r, line) : line;
    dirty_.push_back(static_cast<std::size_t>(r / per_node_));
  }
  void flush();
  void start_probes();
  void on_probe_done(std::size_t ci);
  void on_ctl(std::size_t ci, std::uint32_t ev);
  void on_message(int r, const control::ToWrapper& m);

  int n_, per_node_, ctl_port_, ep_ = -1;
  std::string token_;
  std::vector<Conn> conns_;
  std::vector<Rank> ranks_;
  std::vector<std::size_t> dirty_, probe_queue_;
  std::size_t probes_started_ = 0;
  int probes_open_ = 0;
  net::PortHold hold_;
  int ready_ = 0, stopped_ = 0, closed_ = 0;
  double t_start_ = 0, t_ready_ = 0, t_fail_ = 0, t_stopped_ = 0;
};

// Keys: the probe listener, then connection i (2i+1) and its reach check (2i+2).
constexpr std::uint64_t kListenKey = 0;
constexpr int kMaxProbesOpen = 1024;  // reach checks in flight: the 20,000-file limit

void Engine::flush() {
  for (std::size_t ci : dirty_) {
    Conn& c = conns_[ci];
    if (!c.out.empty() && c.fd >= 0) common::write_all(c.fd, c.out);
    c.out.clear();
  }
  dirty_.clear();
}

void Engine::start_probes() {
  while (probes_open_ < kMaxProbesOpen && probes_started_ < probe_queue_.size()) {
    std::size_t ci = probe_queue_[probes_started_++];
    conns_[ci].probe = connect_nb(hold_.port, node_address(ci));
    watch(conns_[ci].probe, EPOLLOUT, 2 * ci + 2);
    ++probes_open_;
  }
}

// The connection's reach check connected: every rank on it that asked has reached rank 0.
void Engine::on_probe_done(std::size_t ci) {
  Conn& c = conns_[ci];
  epoll_ctl(ep_, EPOLL_CTL_DEL, c.probe, nullptr);
  close(c.probe);
  c.probe = -1;
  c.reached = true;
  --probes_open_;
  for (int r : c.waiting) send(r, control::Reach{1, "lo", {}});
  c.waiting.clear();
  start_probes();
}

void Engine::on_message(int r, const control::ToWrapper& msg) {
  Rank& k = ranks_[static_cast<std::size_t>(r)];
  Conn& c = conn_of(r);
  if (auto* b = std::get_if<control::Bind>(&msg)) {
    hold_ = net::hold_port(b->port, b->fixed != 0);
    watch(hold_.probe.get(), EPOLLIN, kListenKey);
    send(r, control::Port{hold_.port, 1});
  } else if (auto* rv = std::get_if<control::Rendezvous>(&msg)) {
    // gpurun's plan is one machine (--scheduler local): rank 0 is its one node's local rank 0,
    // the one that reports --preflight's node check (a pass) before its REACH.
    if (rv->preflight && r == 0) send(r, control::Preflight{"", -1, {}});
    if (c.reached) return send(r, control::Reach{1, "lo", {}});
    if (c.waiting.empty() && c.probe < 0)
      probe_queue_.push_back(static_cast<std::size_t>(r / per_node_));
    c.waiting.push_back(r);
    start_probes();
  } else if (std::holds_alternative<control::Go>(msg)) {
    k.go = true;
    send(r, control::Running{});
    if (++ready_ == n_) {
      t_ready_ = now_seconds();
      t_fail_ = now_seconds();
      send(n_ / 2, control::Exit{1, 0, 1.0, {}});  // one rank fails
    }
  } else if (std::holds_alternative<control::Stop>(msg)) {
    if (!k.stopped && r != n_ / 2) {
      k.stopped = true;
      if (++stopped_ == n_ - 1) t_stopped_ = now_seconds();
      send(r, control::Exit{0, 15, 2.0, {}});
    }
  } else if (std::holds_alternative<control::Bye>(msg)) {
    if (relayed()) c.out += control::frame(r, "-\n");  // the wrapper ends: the relay says so
    if (++c.byes == c.ranks) {
      flush();
      shutdown(c.fd, SHUT_WR);
    }
  }
}

void Engine::on_ctl(std::size_t ci, std::uint32_t ev) {
  Conn& c = conns_[ci];
  if (!c.hello && (ev & EPOLLOUT)) {
    c.hello = true;
    watch(c.fd, EPOLLIN, 2 * ci + 1, EPOLL_CTL_MOD);
    if (relayed())
      c.out += control::encode(control::RelayHello{token_, fmt::format("node{}", ci), getpid()});
    for (int r = c.first; r < c.first + c.ranks; ++r)
      send(r, control::Hello{token_, r, relayed() ? fmt::format("node{}", ci) : "localhost",
                             getpid()});
    return;
  }
  std::vector<std::string> lines;
  auto st = c.in.read_from(c.fd, lines);
  for (const auto& l : lines) {
    if (!relayed()) {
      if (auto m = control::parse_to_wrapper(l)) on_message(c.first, *m);
      continue;
    }
    auto f = control::parse_frame(l);
    if (!f) continue;
    if (auto m = control::parse_to_wrapper(f->body)) on_message(f->rank, *m);
  }
  if (st != proc::LineReader::State::open) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    c.fd = -1;
    ++closed_;
  }
}

int Engine::run(const std::string& result_file) {
  t_start_ = now_seconds();
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  ranks_.resize(static_cast<std::size_t>(n_));
  conns_.resize(static_cast<std::size_t>((n_ + per_node_ - 1) / per_node_));
  for (std::size_t ci = 0; ci < conns_.size(); ++ci) {
    Conn& c = conns_[ci];
    c.first = static_cast<int>(ci) * per_node_;
    c.ranks = std::min(per_node_, n_ - c.first);
    c.fd = connect_nb(ctl_port_, node_address(ci));
    watch(c.fd, EPOLLOUT, 2 * ci + 1);
  }
  const int total = static_cast<int>(conns_.size());
  std::vector<epoll_event> evs(1024);
  while (closed_ < total) {
    int k = epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), 30000);
    if (k <= 0) {
      fmt::print(stderr, "sim: stuck: {} ready, {} stopped, {} closed of {} connections\n", ready_,
                 stopped_, closed_, total);
      return 4;
    }
    for (int i = 0; i < k; ++i) {
      const std::uint64_t key = evs[static_cast<std::size_t>(i)].data.u64;
      if (key == kListenKey) {
        int c;
        while ((c = accept4(hold_.probe.get(), nullptr, nullptr, SOCK_CLOEXEC)) >= 0) close(c);
      } else if (key % 2 == 0) {
        on_probe_done(key / 2 - 1);
      } else {
        on_ctl(key / 2, evs[static_cast<std::size_t>(i)].events);
      }
    }
    flush();
  }
  FILE* f = std::fopen(result_file.c_str(), "w");
  if (!f) return 5;
  fmt::print(f, "{:.6f} {:.6f} {:.6f} {:.6f}\n", t_start_, t_ready_, t_fail_, t_stopped_);
  std::fclose(f);
  return 0;
}

// As mpirun: `mpirun [--allow-run-as-root] -n N [--oversubscribe] gpurun _rank --plan P
// --control HOST:PORT:TOKEN -- PROGRAM`; BENCH_PER_NODE: ranks a connection (1: no relays).
int engine_main(int argc, char** argv) {
  raise_fd_limit();
  int n = 0;
  std::string control;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "-n") n = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--control") control = argv[i + 1];
  }
  auto c2 = control.rfind(':'), c1 = control.rfind(':', c2 - 1);
  if (n <= 0 || c1 == std::string::npos) {
    fmt::print(stderr, "sim: expected mpirun -n N ... --control HOST:PORT:TOKEN\n");
    return 2;
  }
  const char* out = std::getenv("BENCH_RESULT");
  const char* per_node = std::getenv("BENCH_PER_NODE");
  return Engine(n, per_node ? std::max(1, std::atoi(per_node)) : 1,
                std::atoi(control.substr(c1 + 1, c2 - c1 - 1).c_str()), control.substr(c2 + 1))
      .run(out ? out : "/dev/null");
}

// A row: `nodes` connections of `per_node` ranks each (1: a connection per rank, no relay).
struct Shape {
  int nodes, per_node;
  int ranks() const { return nodes * per_node; }
};

struct Figures {
  double ready, ready_from_gpurun, stop, exit;
};

Figures measure(const std::string& gpurun, const std::string& self, Shape shape) {
  char dir[] = "/tmp/gpurun-bench-cp-XXXXXX";
  if (!mkdtemp(dir)) std::exit(6);
  std::string bin = std::string(dir) + "/mpirun", result = std::string(dir) + "/result";
  if (symlink(self.c_str(), bin.c_str()) != 0) std::exit(6);
  Env env{{"PATH", std::string(dir) + ":/usr/bin:/bin"},
          {"BENCH_RESULT", result},
          {"BENCH_PER_NODE", std::to_string(shape.per_node)}};
  const int n = shape.ranks();
  std::vector<std::string> argv{gpurun,       "-q",     "--scheduler", "local",
                                "--launcher", "mpirun", "-n",          std::to_string(n)};
  // TF_CONFIG's worker ports (MASTER_PORT + 1 + local rank) do not fit 131,072 ranks on one
  // machine; the contracts change the wrappers' environment only, nothing gpurun's control
  // plane does. The per-rank rows keep today's command.
  if (shape.per_node > 1) argv.insert(argv.end(), {"--contract", "torch"});
  argv.insert(argv.end(), {"--", "/bin/true"});
  double t_spawn = now_seconds();
  proc::Child g = proc::Child::spawn(argv, env);
  int st = g.wait();
  double t_exit = now_seconds();
  auto text = common::read_file(result);
  double t0 = 0, ready = 0, fail = 0, stopped = 0;
  if (proc::exit_code(st) != 1 || !text ||
      std::sscanf(text->c_str(), "%lf %lf %lf %lf", &t0, &ready, &fail, &stopped) != 4) {
    fmt::print(stderr, "bench: gpurun -n {} exited {} (want 1, the failed rank's code)\n", n,
               proc::exit_code(st));
    std::exit(7);
  }
  unlink(bin.c_str());
  unlink(result.c_str());
  rmdir(dir);
  return {ready - t0, ready - t_spawn, stopped - fail, t_exit - fail};
}

// "N": N ranks, a connection each; "NxK": N nodes of K ranks, a relay connection each.
Shape parse_shape(const std::string& s) {
  auto x = s.find('x');
  if (x == std::string::npos) return {std::atoi(s.c_str()), 1};
  return {std::atoi(s.substr(0, x).c_str()), std::atoi(s.substr(x + 1).c_str())};
}

int bench_main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: bench_control_plane GPURUN [N | NODESxRANKS ...]\n");
    return 2;
  }
  std::vector<Shape> shapes;
  for (int i = 2; i < argc; ++i) shapes.push_back(parse_shape(argv[i]));
  if (shapes.empty()) shapes = {{64, 1}, {256, 1}, {1024, 1}, {4096, 1}, {512, 8}, {16384, 8}};
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 2;
  self[len] = 0;
  fmt::print("{:>7}  {:>18}  {:>10}  {:>22}  {:>13}  {:>16}\n", "ranks", "connections", "ready (s)",
             "ready from gpurun (s)", "stop all (s)", "gpurun exit (s)");
  for (Shape sh : shapes) {
    if (sh.nodes <= 0 || sh.per_node <= 0) return 2;
    Figures f = measure(argv[1], self, sh);
    std::string conns = sh.per_node == 1 ? fmt::format("{} (per rank)", sh.nodes)
                                         : fmt::format("{} (relays of {})", sh.nodes, sh.per_node);
    fmt::print("{:>7}  {:>18}  {:>10.3f}  {:>22.3f}  {:>13.3f}  {:>16.3f}\n", sh.ranks(), conns,
               f.ready, f.ready_from_gpurun, f.stop, f.exit);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace gpurun::launcher::bench

int main(int argc, char** argv) {
  std::string name = argv[0];
  name = name.substr(name.find_last_of('/') + 1);
  if (name == "mpirun") return gpurun::launcher::bench::engine_main(argc, argv);
  return gpurun::launcher::bench::bench_main(argc, argv);
}

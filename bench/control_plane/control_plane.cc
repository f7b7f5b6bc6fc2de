// control_plane.cc: how gpurun's control plane scales (issue 11, item 8). Run:
//
//   build/bench/control_plane/bench_control_plane build/launcher/gpurun [N ...]
//
// For each N (default 64 256 1024 4096) it starts the real gpurun (`-n N --launcher mpirun`) with
// this program standing in for mpirun (a symlink named mpirun first on PATH): a simulated engine
// that opens N wrapper-protocol connections in one process, speaking launcher/src/control/control.h as
// `gpurun _rank` does (HELLO; rank 0 holds the rendezvous port; every "rank" connects to it as
// its reach check; RUNNING once GO arrives). It measures
//   ready: from the engine's start until all N ranks got GO (every program would start now), and
//          the same from gpurun's start;
//   stop:  from one rank's EXIT 1 until all other N-1 got STOP;
//   exit:  from that EXIT until gpurun itself exited.
// Targets: 4096 ranks ready in <= 2 s, all stopped <= 1 s after one fails.
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

int connect_nb(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  if (fd < 0 ||
      (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS)) {
    fmt::print(stderr, "sim: connect to {}: {}\n", port, strerror(errno));
    std::exit(3);
  }
  net::no_delay(fd);  // as the wrapper's connection
  return fd;
}

// The simulated engine: N wrappers in one process.
class Engine {
 public:
  Engine(int n, int ctl_port, std::string token)
      : n_(n), ctl_port_(ctl_port), token_(std::move(token)) {}
  int run(const std::string& result_file);

 private:
  struct Rank {
    int ctl = -1, probe = -1;
    proc::LineReader in;
    bool hello = false, go = false, stopped = false;
  };
  void watch(int fd, std::uint32_t ev) {
    epoll_event e{ev, {}};
    e.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e);
  }
  void send(int r, const control::ToSupervisor& m) {
    common::write_all(ranks_[static_cast<std::size_t>(r)].ctl, control::encode(m));
  }
  void on_ctl(int r, std::uint32_t ev);
  void on_message(int r, const control::ToWrapper& m);

  int n_, ctl_port_, ep_ = -1;
  std::string token_;
  std::vector<Rank> ranks_;
  std::unordered_map<int, int> rank_of_fd_, rank_of_probe_;
  net::PortHold hold_;
  int ready_ = 0, stopped_ = 0, closed_ = 0;
  double t_start_ = 0, t_ready_ = 0, t_fail_ = 0, t_stopped_ = 0;
};

void Engine::on_message(int r, const control::ToWrapper& msg) {
  Rank& k = ranks_[static_cast<std::size_t>(r)];
  if (auto* b = std::get_if<control::Bind>(&msg)) {
    hold_ = net::hold_port(b->port, b->fixed != 0);
    watch(hold_.probe.get(), EPOLLIN);
    send(r, control::Port{hold_.port, 1});
  } else if (auto* rv = std::get_if<control::Rendezvous>(&msg)) {
    k.probe = connect_nb(rv->port);  // the reach check, answered when it connects
    rank_of_probe_[k.probe] = r;
    watch(k.probe, EPOLLOUT);
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
    shutdown(k.ctl, SHUT_WR);
  }
}

void Engine::on_ctl(int r, std::uint32_t ev) {
  Rank& k = ranks_[static_cast<std::size_t>(r)];
  if (!k.hello && (ev & EPOLLOUT)) {
    k.hello = true;
    epoll_event e{EPOLLIN, {}};
    e.data.fd = k.ctl;
    epoll_ctl(ep_, EPOLL_CTL_MOD, k.ctl, &e);
    send(r, control::Hello{token_, r, "localhost", getpid()});
    return;
  }
  std::vector<std::string> lines;
  auto st = k.in.read_from(k.ctl, lines);
  for (const auto& l : lines)
    if (auto m = control::parse_to_wrapper(l)) on_message(r, *m);
  if (st != proc::LineReader::State::open) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, k.ctl, nullptr);
    close(k.ctl);
    ++closed_;
  }
}

int Engine::run(const std::string& result_file) {
  t_start_ = now_seconds();
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  ranks_.resize(static_cast<std::size_t>(n_));
  for (int r = 0; r < n_; ++r) {
    ranks_[static_cast<std::size_t>(r)].ctl = connect_nb(ctl_port_);
    rank_of_fd_[ranks_[static_cast<std::size_t>(r)].ctl] = r;
    watch(ranks_[static_cast<std::size_t>(r)].ctl, EPOLLOUT);
  }
  std::vector<epoll_event> evs(1024);
  while (closed_ < n_) {
    int k = epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), 30000);
    if (k <= 0) {
      fmt::print(stderr, "sim: stuck: {} ready, {} stopped, {} closed of {}\n", ready_, stopped_,
                 closed_, n_);
      return 4;
    }
    for (int i = 0; i < k; ++i) {
      int fd = evs[static_cast<std::size_t>(i)].data.fd;
      if (fd == hold_.probe.get()) {
        int c;
        while ((c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0) close(c);
      } else if (auto p = rank_of_probe_.find(fd); p != rank_of_probe_.end()) {
        epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
        close(fd);
        ranks_[static_cast<std::size_t>(p->second)].probe = -1;
        send(p->second, control::Reach{1, "lo", {}});
        rank_of_probe_.erase(p);
      } else {
        on_ctl(rank_of_fd_.at(fd), evs[static_cast<std::size_t>(i)].events);
      }
    }
  }
  FILE* f = std::fopen(result_file.c_str(), "w");
  if (!f) return 5;
  fmt::print(f, "{:.6f} {:.6f} {:.6f} {:.6f}\n", t_start_, t_ready_, t_fail_, t_stopped_);
  std::fclose(f);
  return 0;
}

// As mpirun: `mpirun [--allow-run-as-root] -n N [--oversubscribe] gpurun _rank --plan P
// --control HOST:PORT:TOKEN -- PROGRAM`.
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
  return Engine(n, std::atoi(control.substr(c1 + 1, c2 - c1 - 1).c_str()), control.substr(c2 + 1))
      .run(out ? out : "/dev/null");
}

struct Figures {
  double ready, ready_from_gpurun, stop, exit;
};

Figures measure(const std::string& gpurun, const std::string& self, int n) {
  char dir[] = "/tmp/gpurun-bench-cp-XXXXXX";
  if (!mkdtemp(dir)) std::exit(6);
  std::string bin = std::string(dir) + "/mpirun", result = std::string(dir) + "/result";
  if (symlink(self.c_str(), bin.c_str()) != 0) std::exit(6);
  Env env{{"PATH", std::string(dir) + ":/usr/bin:/bin"}, {"BENCH_RESULT", result}};
  double t_spawn = now_seconds();
  proc::Child g = proc::Child::spawn({gpurun, "-q", "--scheduler", "local", "--launcher", "mpirun",
                                      "-n", std::to_string(n), "--", "/bin/true"},
                                     env);
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

int bench_main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: bench_control_plane GPURUN [N ...]\n");
    return 2;
  }
  std::vector<int> ns;
  for (int i = 2; i < argc; ++i) ns.push_back(std::atoi(argv[i]));
  if (ns.empty()) ns = {64, 256, 1024, 4096};
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 2;
  self[len] = 0;
  fmt::print("{:>6}  {:>10}  {:>22}  {:>13}  {:>16}\n", "ranks", "ready (s)",
             "ready from gpurun (s)", "stop all (s)", "gpurun exit (s)");
  for (int n : ns) {
    Figures f = measure(argv[1], self, n);
    fmt::print("{:>6}  {:>10.3f}  {:>22.3f}  {:>13.3f}  {:>16.3f}\n", n, f.ready,
               f.ready_from_gpurun, f.stop, f.exit);
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

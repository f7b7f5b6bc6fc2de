// gpuq daemon: startup, the Unix socket (SO_PEERCRED) and the poll loop (daemon.h).
#include "daemon/daemon.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include "daemon/store.h"
#include "supervise/runfiles.h"

namespace gpurun::queue {
namespace {

// The state directory holds every job's environment (API tokens) and script: it and each folder
// in it must be the daemon's alone. One that another user owns or may write into is refused (they
// could have planted files or links there); the daemon's own are set to `mode`.
void secure_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create {}: {}", path, strerror(errno)));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("state directory {} is not a directory", path));
  if (st.st_uid != geteuid())
    throw std::runtime_error(fmt::format(
        "state directory {} belongs to uid {}, not to uid {} that runs the daemon: it must be "
        "the daemon's alone (the job store holds every job's environment)",
        path, st.st_uid, geteuid()));
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    throw std::runtime_error(fmt::format(
        "state directory {} is writable by {} (mode {:04o}): it must be the daemon's alone; "
        "chmod go-w {} after checking what is in it",
        path, st.st_mode & S_IWOTH ? "every user" : "its group", st.st_mode & 07777, path));
  ::chmod(path.c_str(), mode);
}

// Files of stores written before the daemon made them 0600 (jobs.db was 0644: anyone could read
// every job's environment).
void tighten(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077))
    ::chmod(path.c_str(), st.st_mode & 0700);
}

constexpr int64_t kClientTimeoutMs = 10000;  // a client that sends or reads nothing is dropped
constexpr size_t kMaxClients = 512;          // connections served at once
constexpr size_t kMaxClientsPerUser = 64;    // so one user cannot take every slot
// Replies built and not yet read, per user: past it that user's next requests wait unread, so
// clients that ask for the 7 MB queue of a 10,000-task array and never read it cannot make the
// daemon hold gigabytes.
constexpr size_t kMaxPendingReplyBytes = size_t(64) << 20;

}  // namespace

Daemon::Daemon(DaemonConfig cfg) : cfg_(std::move(cfg)) {
  as_root_ = geteuid() == 0;
  // Everything the daemon and its supervisors create is theirs alone unless made otherwise on
  // purpose (the socket, a job's script; a job's output follows the submitter's umask).
  ::umask(077);
  secure_dir(cfg_.state_dir, 0711);  // jobs reach their own script in spool/
  run_dir_ = cfg_.state_dir + "/run";
  spool_dir_ = cfg_.state_dir + "/spool";
  secure_dir(run_dir_, 0700);
  secure_dir(spool_dir_, 0711);  // jobs must reach their own script, but not list others'
  for (const char* f : {"/jobs.db", "/jobs.db-wal", "/jobs.db-shm", "/daemon.lock"})
    tighten(cfg_.state_dir + f);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  host_ = host;
  if (auto b = read_file(cfg_.boot_id_file)) boot_id_ = b->substr(0, b->find('\n'));
  if (auto dot = host_.find('.'); dot != std::string::npos) host_.resize(dot);

  // One daemon per state dir. A killed daemon's lock can linger for a moment in a forked child
  // that has not exec'd yet, so retry briefly before giving up.
  std::string lock_path = cfg_.state_dir + "/daemon.lock";
  lock_fd_ = Fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock_fd_)
    throw std::runtime_error(fmt::format("cannot open {}: {}", lock_path, strerror(errno)));
  for (int i = 0;; ++i) {
    if (flock(lock_fd_.get(), LOCK_EX | LOCK_NB) == 0) break;
    if (i == 100)
      throw std::runtime_error(
          fmt::format("another gpuq daemon holds {} (one daemon per state directory)", lock_path));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  store_ = std::make_unique<Store>(cfg_.state_dir + "/jobs.db");
  draining_ = store_->meta("draining", "0") == "1";
  for (const auto& [uid, u] : store_->load_usage()) usage_[uid] = {u.gpu_seconds, u.updated_ms};
  for (const auto& row : store_->all_states()) {
    states_[row.id] = row.state;
    if (row.array_job_id) array_members_[row.array_job_id].push_back(row.id);
  }
  for (auto& j : store_->load_active()) admit(std::move(j));
  finished_gpu_seconds_ = store_->finished_gpu_seconds_by_user();
  // Supervisors are re-executions of this binary; SIG_IGN reaps them automatically, and their
  // exits are seen through pidfds, which work for adopted (non-child) supervisors too.
  signal(SIGCHLD, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  recover();
  check_invariants("after recovery");
  open_socket();
}

Daemon::~Daemon() = default;

// Our socket file only: another daemon may have bound the path since.
void Daemon::remove_socket() const {
  struct stat st {};
  if (socket_file_ && ::stat(cfg_.socket_path.c_str(), &st) == 0 &&
      std::make_pair(st.st_dev, st.st_ino) == *socket_file_)
    ::unlink(cfg_.socket_path.c_str());
}

void Daemon::open_socket() {
  sockaddr_un addr{};
  if (cfg_.socket_path.size() >= sizeof(addr.sun_path))
    throw std::runtime_error(fmt::format("socket path '{}' is too long", cfg_.socket_path));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, cfg_.socket_path.c_str(), cfg_.socket_path.size() + 1);
  // The state directory's lock keeps a second daemon off our state, not off our socket path: a
  // daemon of another state directory may answer there. A socket nobody answers on is stale.
  {
    Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0)
      throw std::runtime_error(fmt::format(
          "another gpuq daemon answers on {} (with another state directory): stop it, or give "
          "this one another --socket",
          cfg_.socket_path));
  }
  ::unlink(cfg_.socket_path.c_str());  // a stale socket of a killed daemon
  listen_fd_ = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_) throw std::runtime_error(fmt::format("socket(): {}", strerror(errno)));
  // Root: everyone may connect and SO_PEERCRED tells who they are. A user's daemon: only them.
  mode_t old = umask(as_root_ ? 0 : 0177);
  int rc = ::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old);
  if (rc != 0)
    throw std::runtime_error(fmt::format("cannot bind {}: {}", cfg_.socket_path, strerror(errno)));
  ::chmod(cfg_.socket_path.c_str(), as_root_ ? 0666 : 0600);
  struct stat st {};
  if (::stat(cfg_.socket_path.c_str(), &st) == 0) socket_file_ = {st.st_dev, st.st_ino};
  if (::listen(listen_fd_.get(), 512) != 0)
    throw std::runtime_error(fmt::format("listen {}: {}", cfg_.socket_path, strerror(errno)));
}

void Daemon::accept_clients() {
  while (true) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors: pause accepting briefly instead of spinning on a readable socket.
      if (errno == EMFILE || errno == ENFILE)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    Conn c;
    c.fd = Fd(fd);
    if (conns_.size() >= kMaxClients) continue;  // closed at once
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) continue;
    c.peer = {cred.uid, cred.gid, cred.pid};
    c.last_ms = now_ms();
    // One user cannot take every slot: past the cap the answer is why, unread request or not.
    if (std::count_if(conns_.begin(), conns_.end(), [&](const auto& kv) {
          return kv.second.peer.uid == cred.uid;
        }) >= static_cast<long>(kMaxClientsPerUser))
      reply(c, {{"ok", false},
                {"error", fmt::format("too many connections of user {} at once (at most {})",
                                      cred.uid, kMaxClientsPerUser)}});
    conns_.emplace(fd, std::move(c));
  }
}

void Daemon::reply(Conn& c, nlohmann::json r) {
  // Replace invalid UTF-8 (job names, paths) instead of throwing inside dump(). The document is
  // freed before the frame is built, so a big reply is held once, not three times.
  std::string text = r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  r = nullptr;
  if (text.size() > kMaxReplyBytes)
    text = nlohmann::json({{"ok", false},
                           {"error", fmt::format("the reply would be {:.0f} MiB, more than the {} "
                                                 "MiB a reply may be: ask for fewer jobs at once",
                                                 text.size() / 1048576.0, kMaxReplyBytes >> 20)}})
               .dump();
  c.out = frame(text);
  c.out_off = 0;
}

void Daemon::answer(Conn& c) {
  nlohmann::json resp;
  try {
    Request req = decode_request(c.reader.payload());
    c.reader = FrameReader(kMaxRequestBytes);  // the request's bytes are not kept for the reply
    resp = handle(req, c.peer);
  } catch (const std::exception& e) {
    resp = {{"ok", false}, {"error", e.what()}};
  }
  reply(c, std::move(resp));
}

void Daemon::on_readable(Conn& c, size_t& inbound) {
  char buf[65536];
  while (c.out.empty()) {
    ssize_t n = ::read(c.fd.get(), buf, sizeof(buf));
    if (n == 0) {
      c.out_off = SIZE_MAX;  // peer went away before a whole request: drop it
      return;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) c.out_off = SIZE_MAX;
      return;
    }
    c.last_ms = now_ms();
    bool complete = false;
    inbound += static_cast<size_t>(n);
    if (inbound > kMaxInboundBytesPerUser) {
      reply(c, {{"ok", false},
                {"error", fmt::format("more than {} MiB of unfinished requests of user {} at "
                                      "once: send one request at a time",
                                      kMaxInboundBytesPerUser >> 20, c.peer.uid)}});
      return;
    }
    try {
      complete = c.reader.feed(buf, static_cast<size_t>(n));
    } catch (const std::exception& e) {
      reply(c, {{"ok", false}, {"error", e.what()}});
      return;
    }
    if (!complete) continue;
    // A client that sent its request and hung up gets nothing: do not build the reply.
    pollfd peer{c.fd.get(), POLLOUT, 0};
    if (::poll(&peer, 1, 0) == 1 && (peer.revents & (POLLHUP | POLLERR))) {
      c.out_off = SIZE_MAX;
      return;
    }
    answer(c);
  }
}

bool Daemon::flush(Conn& c) {
  if (c.out_off == SIZE_MAX) return false;
  while (c.out_off < c.out.size()) {
    ssize_t w =
        ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (w < 0) return errno == EAGAIN || errno == EINTR;
    c.out_off += static_cast<size_t>(w);
    c.last_ms = now_ms();
  }
  return c.out.empty();  // keep reading until a reply exists; close once it is sent
}

// One request per user per turn: a user's flood of connections (each asking for the queue of a
// 10,000-task array, 0.25 s to build) cannot keep the others waiting. `pending` and `inbound` are
// each user's unread reply bytes and unfinished request bytes.
void Daemon::serve_clients(const std::vector<pollfd>& fds, size_t conn_base,
                           std::map<uid_t, size_t>& pending, std::map<uid_t, size_t>& inbound) {
  auto full = [&](const Conn& c) { return pending[c.peer.uid] > kMaxPendingReplyBytes; };
  std::set<uid_t> served;
  for (size_t i = conn_base; i < fds.size(); ++i) {
    auto it = conns_.find(fds[i].fd);
    if (it == conns_.end()) continue;
    Conn& c = it->second;
    const bool hup = fds[i].revents & (POLLHUP | POLLERR);
    c.waiting = c.out.empty() && ((fds[i].revents & POLLIN) || full(c));
    if (!(fds[i].revents & POLLIN) && !hup) continue;
    if (!hup && (full(c) || served.count(c.peer.uid))) continue;
    c.waiting = false;
    on_readable(c, inbound[c.peer.uid]);
    if (!c.out.empty()) served.insert(c.peer.uid);
    pending[c.peer.uid] += c.out.size();
  }
}

// The turn's batch is committed; only then do the jobs it marked RUNNING get their supervisors.
void Daemon::end_turn() {
  store_->commit_batch();
  remove_cleanup_files();
  std::vector<int64_t> spawn;
  spawn.swap(to_spawn_);
  for (int64_t id : spawn) {
    auto it = active_.find(id);
    if (it == active_.end()) continue;
    try {
      spawn_supervisor(it->second);
    } catch (const std::exception& e) {
      fmt::print(stderr, "gpuq daemon: cannot start job {}: {}\n", id, e.what());
      finish(it->second, JobState::kFailed, 1, 0, now_ms(), e.what());
    }
  }
  publish_targets();
  check_invariants("at the end of a turn");
}

// SIGTERM or SIGINT arrived (SIGHUP is ignored): the socket goes, the jobs stay.
bool Daemon::stop_requested() {
  signalfd_siginfo si{};
  if (::read(signal_fd_.get(), &si, sizeof(si)) <= 0 || si.ssi_signo == SIGHUP) return false;
  fmt::print(stderr,
             "gpuq daemon: signal {}, exiting; running jobs continue and are adopted by the next "
             "daemon\n",
             si.ssi_signo);
  remove_socket();
  return true;
}

int Daemon::run() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  signal_fd_ = Fd(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  start_sampling();
  fmt::print(stderr, "gpuq daemon: {} GPUs [{}], socket {}, state {}\n", cfg_.gpus.size(),
             join_ids(cfg_.gpus), cfg_.socket_path, cfg_.state_dir);
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({listen_fd_.get(), POLLIN, 0});
    fds.push_back({signal_fd_.get(), POLLIN, 0});
    fds.push_back({sampler_ ? sampler_->fd() : -1, POLLIN, 0});  // fd -1: poll skips it
    const size_t runner_base = fds.size();
    std::vector<int64_t> runner_ids;
    for (auto& [id, r] : runners_) {
      if (!r.pidfd) continue;
      fds.push_back({r.pidfd.get(), POLLIN, 0});
      runner_ids.push_back(id);
    }
    std::map<uid_t, size_t> pending;  // reply bytes built and not yet read, per user
    std::map<uid_t, size_t> inbound;  // bytes of unfinished requests, per user
    for (const auto& [fd, c] : conns_) {
      if (c.out_off != SIZE_MAX) pending[c.peer.uid] += c.out.size() - c.out_off;
      inbound[c.peer.uid] += c.reader.buffered();
    }
    auto full = [&](const Conn& c) { return pending[c.peer.uid] > kMaxPendingReplyBytes; };
    const size_t conn_base = fds.size();
    for (auto& [fd, c] : conns_) {
      // Past its user's pending-reply bound, a request waits unread (poll still says when the
      // peer leaves).
      const short want = !c.out.empty() ? POLLOUT : full(c) ? 0 : POLLIN;
      fds.push_back({fd, want, 0});
    }
    // Runners without a pidfd (pidfd_open unavailable) are polled every 100 ms.
    bool polling = runner_ids.size() < runners_.size();
    int rc = ::poll(fds.data(), fds.size(), dirty_ ? 0 : polling ? 100 : 1000);
    if (rc < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("poll: {}", strerror(errno)));
    if (rc == 0 && !polling) store_->checkpoint();  // a quiet second: no client waits on it
    if ((fds[1].revents & POLLIN) && stop_requested()) return 0;
    // Everything this iteration writes is committed once, before replies go out and before any
    // supervisor starts: one WAL fsync per iteration however many jobs ended, started or arrived.
    store_->begin_batch();
    for (size_t i = 0; i < runner_ids.size(); ++i)
      if (fds[runner_base + i].revents) on_supervisor_exit(runner_ids[i]);
    if (fds[2].revents & POLLIN) on_usage_ticks();
    if (polling) {
      std::vector<int64_t> gone;
      for (auto& [id, r] : runners_)
        if (!r.pidfd && ::kill(r.pid, 0) != 0 && errno == ESRCH) gone.push_back(id);
      for (auto id : gone) on_supervisor_exit(id);
    }
    serve_clients(fds, conn_base, pending, inbound);
    if (dirty_) {
      dirty_ = false;
      schedule_pass();
    }
    end_turn();
    int64_t now = now_ms();
    for (auto it = conns_.begin(); it != conns_.end();) {
      Conn& c = it->second;
      if (!flush(c) || (now - c.last_ms > kClientTimeoutMs && !c.waiting))
        it = conns_.erase(it);
      else
        ++it;
    }
    if (fds[0].revents & POLLIN) accept_clients();
  }
}

}  // namespace gpurun::queue

// The daemon's clients (connections.h).
#include "daemon/connections.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>

#include "supervise/runfiles.h"

namespace gpurun::queue {
namespace {

constexpr int64_t kClientTimeoutMs = 10000;  // a client that sends or reads nothing is dropped
constexpr size_t kMaxClients = 512;          // connections served at once
constexpr size_t kMaxClientsPerUser = 64;    // so one user cannot take every slot

nlohmann::json error_reply(const std::string& what) { return {{"ok", false}, {"error", what}}; }

}  // namespace

Connections::Connections(std::string socket_path, Access access)
    : socket_path_(std::move(socket_path)), access_(access) {}

void Connections::remove_socket() const {
  struct stat st {};
  if (socket_file_ && ::stat(socket_path_.c_str(), &st) == 0 &&
      std::make_pair(st.st_dev, st.st_ino) == *socket_file_)
    ::unlink(socket_path_.c_str());
}

void Connections::open() {
  sockaddr_un addr{};
  if (socket_path_.size() >= sizeof(addr.sun_path))
    throw std::runtime_error(fmt::format("socket path '{}' is too long", socket_path_));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  // The state directory's lock keeps a second daemon off our state, not off our socket path: a
  // daemon of another state directory may answer there. A socket nobody answers on is stale.
  {
    Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      ucred peer{};
      socklen_t len = sizeof(peer);
      const bool known = getsockopt(probe.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0;
      if (known && peer.uid != 0 && peer.uid != geteuid())  // /tmp/gpuq-UID.sock, taken first
        throw std::runtime_error(fmt::format(
            "{} is served by uid {} (pid {}), not by a daemon of yours: another user took the "
            "name; give this daemon another --socket (and your clients GPUQ_SOCKET)",
            socket_path_, peer.uid, peer.pid));
      throw std::runtime_error(fmt::format(
          "another gpuq daemon answers on {} (with another state directory): stop it, or give "
          "this one another --socket",
          socket_path_));
    }
  }
  ::unlink(socket_path_.c_str());  // a stale socket of a killed daemon
  listen_fd_ = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_) throw std::runtime_error(fmt::format("socket(): {}", strerror(errno)));
  // Root: everyone may connect and SO_PEERCRED tells who they are. A user's daemon: only them.
  const bool everyone = access_ == Access::kEveryone;
  mode_t old = umask(everyone ? 0 : 0177);
  int rc = ::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old);
  if (rc != 0)
    throw std::runtime_error(fmt::format("cannot bind {}: {}", socket_path_, strerror(errno)));
  ::chmod(socket_path_.c_str(), everyone ? 0666 : 0600);
  struct stat st {};
  if (::stat(socket_path_.c_str(), &st) == 0) socket_file_ = {st.st_dev, st.st_ino};
  if (::listen(listen_fd_.get(), 512) != 0)
    throw std::runtime_error(fmt::format("listen {}: {}", socket_path_, strerror(errno)));
}

void Connections::accept() {
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
      reply(c, error_reply(fmt::format("too many connections of user {} at once (at most {})",
                                       cred.uid, kMaxClientsPerUser)));
    conns_.emplace(fd, std::move(c));
  }
}

void Connections::reply(Conn& c, nlohmann::json r) {
  // Replace invalid UTF-8 (job names, paths) instead of throwing inside dump(). The document is
  // freed before the frame is built, so a big reply is held once, not three times.
  std::string text = r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  r = nullptr;
  if (text.size() > kMaxReplyBytes)
    text = error_reply(fmt::format("the reply would be {:.0f} MiB, more than the {} MiB a reply "
                                   "may be: ask for fewer jobs at once",
                                   text.size() / 1048576.0, kMaxReplyBytes >> 20))
               .dump();
  c.out = frame(text);
  c.out_off = 0;
}

void Connections::answer(Conn& c, const RequestHandler& handle) {
  nlohmann::json resp;
  try {
    Request req = decode_request(c.reader.payload());
    c.reader = FrameReader(kMaxRequestBytes);  // the request's bytes are not kept for the reply
    resp = handle(req, c.peer);
  } catch (const std::exception& e) {
    resp = error_reply(e.what());
  }
  reply(c, std::move(resp));
}

void Connections::on_readable(Conn& c, size_t& inbound, const RequestHandler& handle) {
  char buf[65536];
  while (c.out.empty()) {
    ssize_t n = ::read(c.fd.get(), buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      c.out_off = SIZE_MAX;  // the peer went away before a whole request: drop it
      return;
    }
    if (n < 0) return;
    c.last_ms = now_ms();
    inbound += static_cast<size_t>(n);
    if (inbound > kMaxInboundBytesPerUser)
      return reply(c, error_reply(fmt::format("more than {} MiB of unfinished requests of user "
                                              "{} at once: send one request at a time",
                                              kMaxInboundBytesPerUser >> 20, c.peer.uid)));
    bool complete = false;
    try {
      complete = c.reader.feed(buf, static_cast<size_t>(n));
    } catch (const std::exception& e) {
      return reply(c, error_reply(e.what()));
    }
    if (!complete) continue;
    // A client that sent its request and hung up gets nothing: do not build the reply.
    pollfd peer{c.fd.get(), POLLOUT, 0};
    if (::poll(&peer, 1, 0) == 1 && (peer.revents & (POLLHUP | POLLERR))) {
      c.out_off = SIZE_MAX;
      return;
    }
    answer(c, handle);
  }
}

bool Connections::send_reply(Conn& c) {
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

void Connections::add_to_poll(std::vector<pollfd>& fds) {
  pending_.clear();
  inbound_.clear();
  for (const auto& [fd, c] : conns_) {
    if (c.out_off != SIZE_MAX) pending_[c.peer.uid] += c.out.size() - c.out_off;
    inbound_[c.peer.uid] += c.reader.buffered();
  }
  poll_base_ = fds.size();
  for (auto& [fd, c] : conns_) {
    // Past its user's pending-reply bound, a request waits unread (poll still says when the
    // peer leaves).
    const short want = !c.out.empty() ? POLLOUT : full(c) ? 0 : POLLIN;
    fds.push_back({fd, want, 0});
  }
}

// One request per user per turn: a user's flood of connections (each asking for the queue of a
// 10,000-task array, 0.25 s to build) cannot keep the others waiting.
void Connections::serve(const std::vector<pollfd>& fds, const RequestHandler& handle) {
  std::set<uid_t> served;
  for (size_t i = poll_base_; i < fds.size(); ++i) {
    auto it = conns_.find(fds[i].fd);
    if (it == conns_.end()) continue;
    Conn& c = it->second;
    const bool hup = fds[i].revents & (POLLHUP | POLLERR);
    c.waiting = c.out.empty() && ((fds[i].revents & POLLIN) || full(c));
    if (!(fds[i].revents & POLLIN) && !hup) continue;
    if (!hup && (full(c) || served.count(c.peer.uid))) continue;
    c.waiting = false;
    on_readable(c, inbound_[c.peer.uid], handle);
    if (!c.out.empty()) served.insert(c.peer.uid);
    pending_[c.peer.uid] += c.out.size();
  }
}

void Connections::flush(int64_t now) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = it->second;
    if (!send_reply(c) || (now - c.last_ms > kClientTimeoutMs && !c.waiting))
      it = conns_.erase(it);
    else
      ++it;
  }
}

}  // namespace gpurun::queue

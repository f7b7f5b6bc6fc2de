// supervisor_conns.cc: the Supervisor's connections (supervisor.h, control.h): a wrapper's own
// (one rank), or a node relay's (that node's ranks, each line framed with its rank). The
// connections sit in an epoll set, so a wake costs what is ready, not what is open: 16,384 node
// relays of 131,072 ranks are one fd each to poll().
#include <fmt/format.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "supervisor/supervisor.h"

namespace gpurun::launcher {
namespace {

constexpr std::size_t kMaxMessage = 16 << 20;  // a STACKS message of many threads
constexpr int kMaxReady = 4096;                // connections handled a wake (the rest: the next)

}  // namespace

void Supervisor::on_connect() {
  int fd;
  while ((fd = accept4(control_.fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
    net::no_delay(fd);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = conns_.size();
    if (epoll_ctl(conn_events_.get(), EPOLL_CTL_ADD, fd, &e) != 0) {
      tell(fmt::format("cannot watch a wrapper's connection: {}", std::strerror(errno)));
      common::Fd(fd).reset();
      continue;
    }
    conns_.push_back(Conn{common::Fd(fd), proc::LineReader(kMaxMessage), -1, false, {}, {}, {}});
  }
}

// The indices of the connections that can be read now (or have closed).
void Supervisor::ready_conns(std::vector<std::size_t>& out) {
  ready_.resize(kMaxReady);
  int n = epoll_wait(conn_events_.get(), ready_.data(), kMaxReady, 0);
  for (int i = 0; i < n; ++i) out.push_back(ready_[static_cast<std::size_t>(i)].data.u64);
}

void Supervisor::drop(Conn& c) {
  c.out.clear();
  if (!c.fd) return;
  epoll_ctl(conn_events_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  c.fd.reset();
}

void Supervisor::on_readable(std::size_t ci) {
  if (ci >= conns_.size() || !conns_[ci].fd) return;
  std::vector<std::string> lines;
  auto state = conns_[ci].in.read_from(conns_[ci].fd.get(), lines);
  for (const auto& line : lines) {
    if (!on_line(ci, line)) {
      state = proc::LineReader::State::closed;
      break;
    }
    if (!conns_[ci].fd) return;
  }
  if (state != proc::LineReader::State::open) on_disconnect(ci);
}

// False: the connection is not one of ours (a first line that is neither HELLO nor RELAY).
bool Supervisor::on_line(std::size_t ci, std::string_view line) {
  Conn& c = conns_[ci];
  if (c.relay) return on_relay_line(ci, line);
  if (c.rank < 0) {
    auto m = control::parse_to_supervisor(line);
    if (m && std::holds_alternative<control::RelayHello>(*m)) {
      on_message(From{ci, -1}, std::get<control::RelayHello>(*m));
      return true;
    }
  }
  return dispatch(From{ci, c.rank}, line);
}

// "<rank> MESSAGE" or "<rank> -" from a relay. A line of a rank this relay did not bring (or
// whose HELLO was refused) is ignored: the relay closes that rank when it reads our "-".
bool Supervisor::on_relay_line(std::size_t ci, std::string_view line) {
  auto f = control::parse_frame(line);
  if (!f || f->rank >= world_) return true;
  From from{ci, f->rank};
  const bool known = conn_of_rank_[static_cast<std::size_t>(f->rank)] == static_cast<int>(ci);
  if (f->body == control::kClosed) {
    if (known) on_rank_closed(from, Attempt::kLostWrapper);
    return true;
  }
  if (known || f->body.rfind(control::Hello::kTag, 0) == 0) dispatch(from, f->body);
  return true;
}

// One message of rank f.rank (-1: a wrapper's connection before its HELLO). False: the
// connection is not one of ours.
bool Supervisor::dispatch(const From& f, std::string_view line) {
  auto m = control::parse_to_supervisor(line);
  const bool hello = m && std::holds_alternative<control::Hello>(*m);
  const bool known =
      f.rank >= 0 && conn_of_rank_[static_cast<std::size_t>(f.rank)] == static_cast<int>(f.conn);
  if (!known) {
    if (!hello) return false;
    on_message(f, std::get<control::Hello>(*m));
    return true;
  }
  if (!m || hello || std::holds_alternative<control::RelayHello>(*m))
    return true;  // unknown to this gpurun, or a repeat
  std::visit([&](const auto& msg) { on_message(f, msg); }, *m);
  return true;
}

void Supervisor::on_message(const From& f, const control::RelayHello& m) {
  Conn& c = conns_[f.conn];
  if (m.token != token_) {
    drop(c);  // not one of ours (or of an earlier attempt)
    return;
  }
  c.relay = true;
  c.host = m.host;
}

// A relay's connection closing loses every rank it carried that had not ended: the whole node.
void Supervisor::on_disconnect(std::size_t ci) {
  Conn& c = conns_[ci];
  const bool relay = c.relay;
  const int rank = c.rank;
  const std::vector<int> ranks = std::move(c.ranks);
  const std::string host = c.host;
  drop(c);
  if (!relay) {
    if (rank >= 0) on_rank_closed(From{ci, rank}, Attempt::kLostWrapper);
    return;
  }
  const std::string why = fmt::format(
      "was lost with its node's control relay (the relay on {} ended: killed, or the node lost?)",
      host);
  for (int r : ranks) on_rank_closed(From{ci, r}, why);
}

void Supervisor::on_rank_closed(const From& f, const std::string& why) {
  conn_of_rank_[static_cast<std::size_t>(f.rank)] = -1;
  if (attempt_.on_lost(f.rank, proc::now_seconds() - t0_, why)) begin_stop("");
}

// What a wake sends goes out at its end, one write a connection: a relay's 8 ranks' BYEs are
// one segment, not 8 (flush_sends, from wait_and_dispatch).
void Supervisor::queue(std::size_t ci, std::string_view bytes) {
  Conn& c = conns_[ci];
  if (!c.fd) return;
  if (c.out.empty()) unsent_.push_back(ci);
  c.out += bytes;
}

void Supervisor::flush_sends() {
  for (std::size_t ci : unsent_) {
    Conn& c = conns_[ci];
    if (c.fd && !c.out.empty()) common::write_all(c.fd.get(), c.out);
    c.out.clear();
  }
  unsent_.clear();
}

void Supervisor::send(const From& f, const control::ToWrapper& m) {
  const std::string line = control::encode(m);
  queue(f.conn, conns_[f.conn].relay ? control::frame(f.rank, line) : line);
}

// A relay gets one frame per rank gpurun accepted through it.
void Supervisor::broadcast(const control::ToWrapper& m) {
  const std::string line = control::encode(m);
  for (std::size_t ci = 0; ci < conns_.size(); ++ci) {
    const Conn& c = conns_[ci];
    if (!c.fd || (!c.relay && c.rank < 0)) continue;
    if (!c.relay) {
      queue(ci, line);
      continue;
    }
    for (int r : c.ranks)
      if (conn_of_rank_[static_cast<std::size_t>(r)] >= 0) queue(ci, control::frame(r, line));
  }
}

}  // namespace gpurun::launcher

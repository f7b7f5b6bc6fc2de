// The daemon's clients: its Unix socket (who connects is told by SO_PEERCRED), the connections,
// reading a request's frame, and writing its reply, each bounded per user so that one user cannot
// stall or exhaust the daemon for the others (README "Security"). What a request means is the
// handler's business (the daemon's); this part only moves bytes.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpurun/queue/protocol.h"
#include "job/request.h"

namespace gpurun::queue {

// Bytes of one user's unfinished requests the daemon holds at once (daemon.h's other bounds).
constexpr size_t kMaxInboundBytesPerUser = size_t(16) << 20;

struct Peer {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

using RequestHandler = std::function<nlohmann::json(const Request&, const Peer&)>;

class Connections {
 public:
  enum class Access { kEveryone, kOwnerOnly };  // root's daemon serves every user
  Connections(std::string socket_path, Access access);

  // Binds the socket; throws when another daemon answers there.
  void open();
  void remove_socket() const;  // ours only: another daemon may have bound the path since
  int listen_fd() const { return listen_fd_.get(); }

  // One turn of the daemon's loop: poll entries for every connection go to `fds`; after poll,
  // serve() answers at most one request per user; after the turn's batch is committed, flush()
  // sends the replies and drops finished and idle clients; accept() takes new ones.
  void add_to_poll(std::vector<pollfd>& fds);
  void serve(const std::vector<pollfd>& fds, const RequestHandler& handle);
  void flush(int64_t now_ms);
  void accept();

 private:
  struct Conn {
    Fd fd;
    Peer peer;
    FrameReader reader{kMaxRequestBytes};
    std::string out;
    size_t out_off = 0;
    int64_t last_ms = 0;   // the last byte read or written: a client that stops reading is dropped
    bool waiting = false;  // its request waits unread on our side: not the client's stall
  };

  // Reads; answers once a whole request is in (c.out). `inbound` is the bytes of its user's
  // unfinished requests, which past kMaxInboundBytesPerUser get an error instead of more reading.
  void on_readable(Conn& c, size_t& inbound, const RequestHandler& handle);
  void answer(Conn& c, const RequestHandler& handle);  // a whole request is in
  bool send_reply(Conn& c);                            // false when finished (close it)
  static void reply(Conn& c, nlohmann::json r);
  bool full(const Conn& c) { return pending_[c.peer.uid] > kMaxPendingReplyBytes; }

  // Replies built and not yet read, per user: past it that user's next requests wait unread, so
  // clients that ask for the 7 MB queue of a 10,000-task array and never read it cannot make the
  // daemon hold gigabytes.
  static constexpr size_t kMaxPendingReplyBytes = size_t(64) << 20;

  const std::string socket_path_;
  const Access access_;
  Fd listen_fd_;
  std::optional<std::pair<dev_t, ino_t>> socket_file_;  // the socket file we bound
  std::map<int, Conn> conns_;
  // This turn's: where its connections start in the poll array, and per user the reply bytes
  // built and not yet read and the bytes of unfinished requests.
  size_t poll_base_ = 0;
  std::map<uid_t, size_t> pending_, inbound_;
};

}  // namespace gpurun::queue

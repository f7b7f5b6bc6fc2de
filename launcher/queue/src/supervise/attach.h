// attach.h: how `gpuq run` and `gpuq alloc` hand the caller's terminal (or its standard input,
// output and error) to their job, which the job's supervisor starts like any batch job.
//
// The client binds an abstract Unix socket named "gpuq-run-<uid>-<random>" (no file: nothing to
// clean up, nothing a symlink can redirect) and sends its name and a random token with the
// submission. When the job starts, its supervisor connects, checks that the peer is the job's
// user (SO_PEERCRED) and says
//     GPUQRUN1 <job id> <token>\n
// The client checks that the peer is root or itself and that the token is the one it sent (only
// the daemon and the supervisor know it), then answers
//     FDS\n   with three descriptors (SCM_RIGHTS): the job's stdin, stdout and stderr
// (with --pty, the slave side of a pseudo-terminal the client relays, three times). From then
// on the connection is the session's lifeline:
//     client -> supervisor   SIG <n>\n            a signal for the job's process group
//     supervisor -> client   EXIT <code> <sig>\n  the job has ended
// A client that goes away (killed, its terminal closed) is the supervisor's end of file: the
// supervisor stops the job at once, and the daemon frees its GPUs as for any ended job. The
// supervisor survives a restart of the daemon, so the session does too.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <istream>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gpurun/common/posix.h"
#include "gpurun/queue/job.h"

namespace gpurun::queue {

using common::Fd;


// `bytes` random bytes (getrandom) as lowercase hex; throws when the kernel cannot give them.
std::string random_hex(size_t bytes);
constexpr const char* kAttachHello = "GPUQRUN1";

// Client side: a new name and token, and the listening socket bound to that name.
struct AttachListener {
  AttachSpec spec;
  Fd fd;
};
AttachListener listen_attach(bool pty);

// Supervisor side: connects to `name`; throws std::runtime_error naming it when nobody listens.
Fd connect_attach(const std::string& name);

// The abstract Unix socket names (without the leading '@') that /proc/net/unix, read from `in`,
// lists as listening. A pending gpuq run job whose client's socket is not among them has lost
// its client (the daemon cancels it then). Lines it cannot read are skipped.
std::set<std::string> listening_abstract_sockets(std::istream& in);

// Supervisor side, the whole handshake: connects, checks that the peer is `uid`, says hello and
// waits up to timeout_ms for the three descriptors. Throws std::runtime_error saying why not
// (the client is gone, another user's socket, no answer).
struct AttachedClient {
  Fd sock;
  std::vector<Fd> stdio;  // the job's stdin, stdout, stderr
};
AttachedClient attach_to_client(const AttachSpec& spec, int64_t job_id, uid_t uid,
                                int timeout_ms);

// Client side: accepts connections on `listener` until one says the right hello for `job_id`
// and the token, from root or this user, then sends it `stdio`. Returns the connection, or an
// invalid Fd when nothing connected within timeout_ms. Impostors are dropped unanswered.
Fd accept_supervisor(const AttachListener& listener, int64_t job_id,
                     const std::vector<int>& stdio, int timeout_ms);

std::optional<ucred> peer_credentials(int fd);

// Descriptor passing (SCM_RIGHTS), at most kMaxPassedFds a message: the attach protocol's and
// the supervisor's setup pipe to its job (job_supervisor.cc). sendmsg's and recvmsg's results;
// received descriptors (close-on-exec) are appended to *fds.
constexpr size_t kMaxPassedFds = 3;
ssize_t send_with_fds(int sock, std::string_view data, const std::vector<int>& fds);
ssize_t recv_with_fds(int sock, char* buf, size_t len, int flags, std::vector<Fd>* fds);

// One line ("...\n", at most 256 bytes) with the descriptors sent alongside it.
void send_line(int sock, const std::string& line, const std::vector<int>& fds = {});

// Reads lines from a stream socket, with any descriptors that come with them. poll_lines reads
// what is there without waiting; read_line waits up to timeout_ms for one whole line.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // Whole lines read so far; false once the peer closed (or the socket failed).
  bool poll_lines(std::vector<std::string>* lines);
  std::optional<std::string> read_line(int timeout_ms);
  std::vector<Fd> take_fds() { return std::move(fds_); }

 private:
  bool read_some();  // false at end of file or error
  int fd_;
  std::string buf_;
  std::vector<Fd> fds_;
  bool eof_ = false;
};

}  // namespace gpurun::queue

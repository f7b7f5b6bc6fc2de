// control.h: the control protocol between gpurun (the supervisor) and each rank's wrapper
// (`gpurun _rank`), in one place for both ends.
//
// A rank's wrapper talks to gpurun over its own TCP connection, or through its node's relay
// (below). A message is one line: its tag, then its fields, each after one
// space. Numbers are decimal. A std::string field is one word: space, '%' and control characters
// are %XX-escaped, and the empty string is "%". A Text field (always last) runs to the end of the
// line with only '%', CR and LF escaped, so ordinary text stays readable. A receiver ignores
// fields after the ones it knows (a newer peer may append some) and returns nothing for a line
// whose tag it does not know or whose fields do not parse. (Not JSON: a rank's output is bytes,
// not always UTF-8, and JSON strings would have to replace or base64 what is not; %XX carries
// every byte and leaves ordinary text readable. The escaping is common::percent_encode.)
//
// Relays (one connection per node, not per rank). When a node has several ranks, its first
// wrapper to bind the abstract Unix socket relay_socket_name(token, host) forks the node's relay
// (wrapper/relay.h): the node's wrappers connect to it there and speak this protocol to it
// unchanged; it holds the node's one TCP connection to gpurun. On that connection the relay first
// sends RELAY (below), then every line in either direction is framed: "<rank> <message line>"
// (a message to or from that rank), and "<rank> -" (either way: that rank's local connection is
// over; from gpurun: close it, its HELLO was refused). Batched both ways: the relay writes what
// one wake read from all its wrappers in one write, and gpurun what one wake sends a connection
// (a broadcast's GO, STOP, DUMP or signal: one frame per rank it accepted there; BYEs), so one
// TCP segment carries many ranks' events. (No "to all ranks here" frame: only gpurun knows whose
// HELLO it accepted.) The relay's connection closing is the loss of every rank it carried that
// had not ended: the whole node.
//
// Adding a message: declare a struct with a unique kTag and a fields() that ties its members in
// wire order, add it to ToSupervisor or ToWrapper, and handle it where that variant is visited
// (std::visit makes a missing handler a compile error).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>

namespace gpurun::launcher::control {

// A field that runs to the end of the line (see above).
struct Text {
  std::string value;
};

// --- wrapper -> gpurun ---------------------------------------------------------------------
// The rank is known from the connection's HELLO (on a relay's connection, from each line's
// frame); later messages do not repeat it.

// First line of a node relay's connection (see above); `token` as in Hello, `host` the node.
struct RelayHello {
  static constexpr std::string_view kTag = "RELAY";
  std::string token;
  std::string host;
  std::int64_t pid = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.token, s.host, s.pid);
  }
};

// First message on a connection; `token` proves the wrapper belongs to this launch attempt.
struct Hello {
  static constexpr std::string_view kTag = "HELLO";
  std::string token;
  int rank = -1;
  std::string host;
  std::int64_t pid = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.token, s.rank, s.host, s.pid);
  }
};

// Rank 0's wrapper holds this rendezvous port (the answer to Bind); `probe`: it listens there
// for the other ranks' reach checks (0 when a fixed port was taken by something else).
// `bw_port`: where it serves --preflight-bandwidth's exchanges (0: it does not).
struct Port {
  static constexpr std::string_view kTag = "PORT";
  int port = 0;
  int probe = 1;
  int bw_port = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.port, s.probe, s.bw_port);
  }
};

// Whether this rank reached rank 0's host at MASTER_ADDR:MASTER_PORT, through which interface;
// sent on the first failure (with why) and on success.
struct Reach {
  static constexpr std::string_view kTag = "REACH";
  int ok = 0;
  std::string iface;
  Text detail;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.ok, s.iface, s.detail);
  }
};

// --preflight, from each node's local rank 0, before its REACH: what is wrong with the node
// (`failures`: the GPUs the plan gave it missing, unhealthy or unreadable, too little space in
// TMPDIR; one reason a line, none: it passed), the link's speed to rank 0's node
// (--preflight-bandwidth, MB/s; -1: not measured), and what could not be checked (`notes`, one a
// line: no NVML and no nvidia-smi, a bandwidth exchange that failed).
struct Preflight {
  static constexpr std::string_view kTag = "PREFLIGHT";
  std::string failures;
  double mb_per_s = -1;
  Text notes;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.failures, s.mb_per_s, s.notes);
  }
};

// The program has been started.
struct Running {
  static constexpr std::string_view kTag = "RUNNING";
  template <class S>
  static auto fields(S&) {
    return std::tie();
  }
};

// The rank made progress (a new heartbeat step, or output); `step` is its latest step, -1 if it
// never beat.
struct StepReport {
  static constexpr std::string_view kTag = "PROGRESS";
  std::int64_t step = -1;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.step);
  }
};

// Output of the program: whole lines, or (partial=1) the start of a line that stayed unfinished.
struct Output {
  static constexpr std::string_view kTag = "OUT";
  int stream = 1;  // 1 stdout, 2 stderr
  int partial = 0;
  Text text;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.stream, s.partial, s.text);
  }
};

// Every thread's stack of every process of the rank (the answer to DumpStacks).
struct Stacks {
  static constexpr std::string_view kTag = "STACKS";
  Text text;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.text);
  }
};

// --monitor, from a node's local rank 0: one sample of the node's GPUs that belong to the job
// (`snapshot` is encode_snapshot's line, gpu_sampler.h); `ranks` says whose each of its GPUs is,
// in the snapshot's order: rank numbers joined by ',', -1 for a GPU no rank was given.
struct GpuSamples {
  static constexpr std::string_view kTag = "GPUS";
  std::string ranks;
  Text snapshot;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.ranks, s.snapshot);
  }
};

// --monitor: this node's GPUs cannot be sampled (no NVML and no nvidia-smi, a tool that hangs);
// sent once per attempt, the job goes on.
struct GpuSamplesFailed {
  static constexpr std::string_view kTag = "GPUSFAIL";
  Text what;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.what);
  }
};

// The program ended: exit code, or the signal that killed it, after `seconds`; `what` says why
// when it never ran (an exec failure), else empty.
struct Exit {
  static constexpr std::string_view kTag = "EXIT";
  int code = 0;
  int signal = 0;
  double seconds = 0;
  Text what;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.code, s.signal, s.seconds, s.what);
  }
};

// --- gpurun -> wrapper ---------------------------------------------------------------------

// To rank 0: take and hold the rendezvous port (`fixed`: exactly this one, else the first free
// one from it), and answer with Port; `bandwidth`: also serve --preflight-bandwidth's exchanges
// until GO.
struct Bind {
  static constexpr std::string_view kTag = "BIND";
  int port = 0;
  int fixed = 0;
  int bandwidth = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.port, s.fixed, s.bandwidth);
  }
};

// MASTER_PORT; find the interface that routes to MASTER_ADDR, check (if `check`) that a TCP
// connection reaches rank 0's host on that port, and answer with Reach. `preflight`: a node's
// local rank 0 first checks its node (its GPUs; at least `min_tmp` bytes free in TMPDIR, 0: not
// checked; with `bw_port`, an exchange with rank 0's wrapper there) and answers with Preflight.
struct Rendezvous {
  static constexpr std::string_view kTag = "RENDEZVOUS";
  int port = 0;
  int check = 1;
  int preflight = 0;
  std::int64_t min_tmp = 0;
  int bw_port = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.port, s.check, s.preflight, s.min_tmp, s.bw_port);
  }
};

// Every rank reached rank 0: start the program. `restart` is GPURUN_RESTART_COUNT;
// `watch` asks for StepReport messages and readiness for DumpStacks (--hang-timeout);
// `cpu_bind` is --cpu-bind (none, auto or a list); `monitor_ms` (--monitor): each node's local
// rank 0 samples the node's GPUs this often and sends GpuSamples (0: off).
struct Go {
  static constexpr std::string_view kTag = "GO";
  int restart = 0;
  int watch = 0;
  std::string cpu_bind = "none";
  int monitor_ms = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.restart, s.watch, s.cpu_bind, s.monitor_ms);
  }
};

// Stop the program: TERM to its process group, KILL after a grace.
struct Stop {
  static constexpr std::string_view kTag = "STOP";
  template <class S>
  static auto fields(S&) {
    return std::tie();
  }
};

// Forward a signal to the program.
struct Signal {
  static constexpr std::string_view kTag = "SIG";
  int signal = 0;
  template <class S>
  static auto fields(S& s) {
    return std::tie(s.signal);
  }
};

// Collect every stack of the rank and answer with Stacks.
struct DumpStacks {
  static constexpr std::string_view kTag = "DUMP";
  template <class S>
  static auto fields(S&) {
    return std::tie();
  }
};

// gpurun has the EXIT: the wrapper may end with status 0, so the engine adds nothing.
struct Bye {
  static constexpr std::string_view kTag = "BYE";
  template <class S>
  static auto fields(S&) {
    return std::tie();
  }
};

using ToSupervisor = std::variant<Hello, RelayHello, Port, Reach, Preflight, Running, StepReport,
                                  Output, Stacks, GpuSamples, GpuSamplesFailed, Exit>;
using ToWrapper = std::variant<Bind, Rendezvous, Go, Stop, Signal, DumpStacks, Bye>;

// One line, '\n' included.
std::string encode(const ToSupervisor& m);
std::string encode(const ToWrapper& m);
// A line without its '\n'; nullopt for an unknown tag or fields that do not parse.
std::optional<ToSupervisor> parse_to_supervisor(std::string_view line);
std::optional<ToWrapper> parse_to_wrapper(std::string_view line);

// A relay connection's framing (see above); a Frame whose body is kClosed is "<rank> -".
constexpr std::string_view kClosed = "-";
struct Frame {
  int rank = -1;
  std::string_view body;  // the message line, without '\n'
};
// `line` is one encoded message ('\n' included), or kClosed plus '\n'.
std::string frame(int rank, std::string_view line);
// A line without its '\n'; nullopt when it is not "<rank> BODY" with a rank >= 0.
std::optional<Frame> parse_frame(std::string_view line);
// The abstract Unix socket where the relay of `host` for the attempt `token` listens.
std::string relay_socket_name(std::string_view token, std::string_view host);

// The escaping of a std::string field and of a Text field (exposed for tests).
std::string escape_word(std::string_view s);
std::string escape_text(std::string_view s);
std::optional<std::string> unescape(std::string_view s);

}  // namespace gpurun::launcher::control

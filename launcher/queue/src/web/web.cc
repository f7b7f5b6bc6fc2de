// `gpuq web`: the read-only status page, /api/status and Prometheus /metrics over HTTP. An
// unprivileged process (started as root it drops to --user, default nobody, once the port is
// bound) that asks the daemon over its socket for every page; it serves no job output and offers
// no job control. Boost.Beast on one asio thread: a connection costs a few KiB and a timer, not a
// thread, so hundreds of idle or slow clients cannot starve the others. At --max-connections a new
// connection pushes out the one that has waited longest without sending a request (and is closed
// when none is idle); a request must arrive within 10 s, with at most 8 KiB of headers (414 for a
// longer request line, 431 for longer fields) and 16 KiB of body (413); only GET and HEAD are
// served (405). Page loads that arrive together share one daemon "status" request.
#include <fmt/format.h>
#include <grp.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <functional>
#include <iostream>
#include <list>
#include <memory>
#include <optional>

#include "client/client.h"
#include "gpurun/common/posix.h"
#include "gpurun/queue/protocol.h"
#include "gpurun/queue/web_render.h"

namespace gpurun::queue {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace po = boost::program_options;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using namespace std::chrono_literals;

constexpr size_t kHeaderLimit = 8192;
constexpr size_t kBodyLimit = 16384;
constexpr uint32_t kMaxDaemonReply = 64u << 20;

struct WebConfig {
  std::string socket;
  int refresh_s = 10;
  size_t max_connections = 256;
};

// The daemon's reply, or why there is none.
struct Reply {
  std::optional<nlohmann::json> json;
  std::string error;
  bool daemon_said_no = false;  // the daemon answered ok=false (a bad job id)
};
using ReplyFn = std::function<void(const Reply&)>;

// One request to the daemon over its Unix socket, asynchronously, within 5 s.
class DaemonCall : public std::enable_shared_from_this<DaemonCall> {
 public:
  DaemonCall(asio::io_context& io, std::string path, const nlohmann::json& req, ReplyFn done)
      : sock_(io),
        timer_(io),
        path_(std::move(path)),
        out_(frame(req.dump())),
        done_(std::move(done)) {}

  void start() {
    auto self = shared_from_this();
    timer_.expires_after(5s);
    timer_.async_wait([self](beast::error_code ec) {
      if (!ec) self->sock_.close();  // the pending operation fails with operation_aborted
    });
    sock_.async_connect(local::endpoint(path_), [self](beast::error_code ec) {
      if (ec) return self->finish("connect", ec);
      asio::async_write(self->sock_, asio::buffer(self->out_),
                        [self](beast::error_code ec, size_t) {
                          if (ec) return self->finish("send", ec);
                          self->read_header();
                        });
    });
  }

 private:
  void read_header() {
    auto self = shared_from_this();
    asio::async_read(sock_, asio::buffer(header_), [self](beast::error_code ec, size_t) {
      if (ec) return self->finish("read", ec);
      uint32_t n = (uint32_t(self->header_[0]) << 24) | (uint32_t(self->header_[1]) << 16) |
                   (uint32_t(self->header_[2]) << 8) | uint32_t(self->header_[3]);
      if (n > kMaxDaemonReply) return self->fail("reply too large");
      self->payload_.resize(n);
      asio::async_read(self->sock_, asio::buffer(self->payload_),
                       [self](beast::error_code ec, size_t) {
                         if (ec) return self->finish("read", ec);
                         self->parse();
                       });
    });
  }
  void parse() {
    Reply r;
    try {
      auto j = nlohmann::json::parse(payload_);
      r.daemon_said_no = !j.value("ok", false);
      if (r.daemon_said_no)
        r.error = j.value("error", std::string("request failed"));
      else
        r.json = std::move(j);
    } catch (const std::exception& e) {
      r.error = fmt::format("unreadable reply: {}", e.what());
    }
    deliver(r);
  }
  void finish(const char* step, beast::error_code ec) {
    fail(ec == asio::error::operation_aborted ? fmt::format("{}: no answer within 5 s", step)
                                              : fmt::format("{}: {}", step, ec.message()));
  }
  void fail(const std::string& why) {
    Reply r;
    r.error = fmt::format("cannot reach the gpuq daemon at {} ({})", path_, why);
    deliver(r);
  }
  void deliver(const Reply& r) {
    timer_.cancel();
    if (done_) std::exchange(done_, nullptr)(r);
  }

  local::socket sock_;
  asio::steady_timer timer_;
  std::string path_, out_, payload_;
  unsigned char header_[4] = {};
  ReplyFn done_;
};

class Server;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, Server& server);
  ~Session();
  void read();
  void evict();  // closes an idle connection to make room for a new one

 private:
  void on_read(beast::error_code ec);
  void handle(const http::request<http::string_body>& req);
  enum class Close { kIfAsked, kAlways };
  void respond(int status, const std::string& type, std::string body, Close close = Close::kIfAsked,
               const char* allow = nullptr);
  void route(const std::string& path);

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{kHeaderLimit + kBodyLimit};
  std::optional<http::request_parser<http::string_body>> parser_;
  Server& server_;
  bool head_ = false;
  unsigned served_ = 0;
  http::response<http::string_body> res_;
  std::optional<std::list<std::weak_ptr<Session>>::iterator> idle_at_;  // in Server::idle
  bool counted_ = true;                                                 // in Server::connections
};

class Server {
 public:
  Server(asio::io_context& io, tcp::acceptor acceptor, WebConfig cfg)
      : io_(io), acceptor_(std::move(acceptor)), retry_(io), cfg_(std::move(cfg)) {}
  void accept();
  // The daemon's status, shared by every request that arrives while one is in flight.
  void status(ReplyFn fn);
  void call(const nlohmann::json& req, ReplyFn fn) {
    std::make_shared<DaemonCall>(io_, cfg_.socket, req, std::move(fn))->start();
  }
  const WebConfig& cfg() const { return cfg_; }
  size_t connections = 0;
  std::list<std::weak_ptr<Session>> idle;  // sessions waiting for a request, oldest first

 private:
  asio::io_context& io_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  WebConfig cfg_;
  std::vector<ReplyFn> waiting_;
};

void Server::accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {  // out of descriptors: wait instead of spinning on a listening socket
      retry_.expires_after(50ms);
      retry_.async_wait([this](beast::error_code) { accept(); });
      return;
    }
    while (connections >= cfg_.max_connections && !idle.empty()) {
      auto oldest = idle.front().lock();
      idle.pop_front();
      if (oldest) oldest->evict();
    }
    // With every connection busy (not idle), s closes here, at once.
    if (connections < cfg_.max_connections) std::make_shared<Session>(std::move(s), *this)->read();
    accept();
  });
}

void Server::status(ReplyFn fn) {
  waiting_.push_back(std::move(fn));
  if (waiting_.size() > 1) return;
  call({{"op", "status"}}, [this](const Reply& r) {
    auto fns = std::move(waiting_);
    waiting_.clear();
    for (auto& f : fns) f(r);
  });
}

Session::Session(tcp::socket s, Server& server) : stream_(std::move(s)), server_(server) {
  server_.connections += 1;
}
Session::~Session() {
  if (counted_) server_.connections -= 1;
  if (idle_at_) server_.idle.erase(*idle_at_);
}

void Session::evict() {
  idle_at_.reset();  // the server took it off its list
  counted_ = false;  // its slot is free now; its read handler only has to notice the close
  server_.connections -= 1;
  beast::error_code ignored;
  stream_.socket().close(ignored);
}

void Session::read() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(kBodyLimit);
  stream_.expires_after(served_ ? 5s : 10s);  // idle keep-alive, or a first request's headers
  idle_at_ = server_.idle.insert(server_.idle.end(), weak_from_this());
  http::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
}

void Session::on_read(beast::error_code ec) {
  if (idle_at_) server_.idle.erase(*idle_at_);
  idle_at_.reset();
  if (ec == http::error::header_limit) {
    // 414 when the request line alone overflows (it was never parsed), 431 when the fields do.
    bool line = parser_->get().target().empty();
    return respond(line ? 414 : 431, "text/html; charset=utf-8",
                   render_error_page(
                       line ? 414 : 431, line ? "URI Too Long" : "Request Header Fields Too Large",
                       fmt::format("requests are limited to {} bytes of headers", kHeaderLimit)),
                   Close::kAlways);
  }
  if (ec == http::error::body_limit)
    return respond(413, "text/html; charset=utf-8",
                   render_error_page(413, "Payload Too Large", "this server takes no bodies"),
                   Close::kAlways);
  if (ec) {  // timeout, a closed connection, or garbage: nothing more to say
    if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
        ec != asio::error::connection_reset && ec != asio::error::eof &&
        ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor)
      return respond(400, "text/html; charset=utf-8",
                     render_error_page(400, "Bad Request", ec.message()), Close::kAlways);
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return;
  }
  handle(parser_->get());
}

void Session::handle(const http::request<http::string_body>& req) {
  head_ = req.method() == http::verb::head;
  if (req.method() != http::verb::get && !head_) {
    return respond(405, "text/html; charset=utf-8",
                   render_error_page(405, "Method Not Allowed",
                                     "this page is read-only: only GET and HEAD are served"),
                   Close::kAlways, "GET, HEAD");
  }
  std::string target(req.target());
  route(target.substr(0, target.find('?')));
}

void Session::route(const std::string& path) {
  auto self = shared_from_this();
  const int refresh = server_.cfg().refresh_s;
  const char* html = "text/html; charset=utf-8";
  auto unavailable = [self, html](const Reply& r) {
    self->respond(503, html, render_error_page(503, "Service Unavailable", r.error));
  };
  if (path == "/" || path == "/index.html" || path == "/api/status" || path == "/metrics") {
    return server_.status([self, path, refresh, html, unavailable](const Reply& r) {
      if (!r.json) return unavailable(r);
      if (path == "/api/status") return self->respond(200, "application/json", r.json->dump());
      if (path == "/metrics")
        return self->respond(200, "text/plain; version=0.0.4; charset=utf-8",
                             render_metrics(*r.json));
      self->respond(200, html, render_status_page(*r.json, refresh));
    });
  }
  const std::string prefix = "/job/";
  std::string id = path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : "";
  if (!id.empty() && id.size() <= 24 && id.find_first_not_of("0123456789_") == std::string::npos) {
    return server_.call({{"op", "stats"}, {"ids", {id}}, {"max_points", 600}},
                        [self, id, refresh, html, unavailable](const Reply& r) {
                          if (r.json && r.json->contains("tasks"))
                            return self->respond(200, html, render_array_page(*r.json, refresh));
                          if (r.json)
                            return self->respond(200, html, render_job_page(*r.json, refresh));
                          if (!r.daemon_said_no) return unavailable(r);
                          self->respond(404, html, render_error_page(404, "Not Found", r.error));
                        });
  }
  respond(404, html, render_error_page(404, "Not Found", "no such page: " + path));
}

void Session::respond(int status, const std::string& type, std::string body, Close how,
                      const char* allow) {
  res_ = {};
  res_.version(11);
  if (allow) res_.set(http::field::allow, allow);
  res_.result(static_cast<http::status>(status));
  res_.set(http::field::server, "gpuq");
  res_.set(http::field::content_type, type);
  res_.set(http::field::cache_control, "no-store");
  res_.set("X-Content-Type-Options", "nosniff");
  res_.set("Content-Security-Policy",
           "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
           "frame-ancestors 'none'");
  res_.set("Referrer-Policy", "no-referrer");
  served_ += 1;
  const bool close =
      how == Close::kAlways || served_ >= 100 || !parser_->is_done() || !parser_->keep_alive();
  res_.keep_alive(!close);
  res_.content_length(body.size());
  if (!head_) res_.body() = std::move(body);
  stream_.expires_after(10s);
  http::async_write(
      stream_, res_, [self = shared_from_this(), close](beast::error_code ec, size_t) {
        beast::error_code ignored;
        if (ec || close)
          return void(self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored));
        self->read();
      });
}

// "127.0.0.1:8080", "[::1]:8080", "0.0.0.0:80".
tcp::endpoint parse_listen(const std::string& text) {
  auto colon = text.rfind(':');
  std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  std::string port = colon == std::string::npos ? "" : text.substr(colon + 1);
  beast::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    throw std::invalid_argument(fmt::format(
        "--listen '{}': expected ADDRESS:PORT with a numeric address (127.0.0.1:8080, [::1]:8080)",
        text));
  return {addr, static_cast<unsigned short>(std::stoi(port))};
}

// Started as root, the server gives up root once its port is bound: it needs nothing else.
void drop_privileges(const std::string& user) {
  if (geteuid() != 0) return;
  const auto pw = common::passwd_entry(user);
  if (!pw) throw std::runtime_error(fmt::format("--user '{}': no such user", user));
  if (pw->uid == 0)
    throw std::invalid_argument("--user must not be root: the page needs no privilege");
  if (setgroups(0, nullptr) != 0 || setgid(pw->gid) != 0 || setuid(pw->uid) != 0)
    throw std::runtime_error(fmt::format("cannot become {}: {}", user, strerror(errno)));
}

}  // namespace

int cmd_web(const Args& a) {
  po::options_description desc("gpuq web options");
  desc.add_options()("listen", po::value<std::string>()->default_value("127.0.0.1:8080"),
                     "address and port to serve on (port 0: any free port)")(
      "user", po::value<std::string>()->default_value("nobody"),
      "the user to run as when started as root")("refresh", po::value<int>()->default_value(10),
                                                 "seconds between page refreshes")(
      "max-connections", po::value<size_t>()->default_value(256),
      "connections served at once; more are closed at once");
  Parsed p;
  if (!parse(a, desc, nullptr,
             "usage: gpuq web [--listen 127.0.0.1:8080] [--user nobody]\n"
             "Serves a read-only status page (GPU tiles, the queue, recent jobs, a page per job),\n"
             "/api/status (JSON) and /metrics (Prometheus), asking the daemon for each page. It\n"
             "listens on localhost unless told otherwise, and drops root once the port is bound.",
             &p))
    return 0;
  WebConfig cfg;
  cfg.socket = p.socket;
  cfg.refresh_s = p.vm["refresh"].as<int>();
  cfg.max_connections = p.vm["max-connections"].as<size_t>();
  if (cfg.refresh_s < 0 || cfg.max_connections < 1)
    throw std::invalid_argument("--refresh must be >= 0 and --max-connections >= 1");
  tcp::endpoint at = parse_listen(p.vm["listen"].as<std::string>());
  asio::io_context io(1);
  tcp::acceptor acceptor(io);
  beast::error_code ec;
  acceptor.open(at.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(at, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error(
        fmt::format("cannot listen on {}: {}", p.vm["listen"].as<std::string>(), ec.message()));
  drop_privileges(p.vm["user"].as<std::string>());
  signal(SIGPIPE, SIG_IGN);
  asio::signal_set stop(io, SIGINT, SIGTERM);
  stop.async_wait([&](beast::error_code, int) { io.stop(); });
  const tcp::endpoint bound = acceptor.local_endpoint();  // the real port when 0 was asked
  Server server(io, std::move(acceptor), cfg);
  server.accept();
  fmt::print("gpuq web: serving http://{}:{}/ (daemon socket {})\n",
             at.address().is_v6() ? "[" + at.address().to_string() + "]" : at.address().to_string(),
             bound.port(), cfg.socket);
  std::fflush(stdout);
  io.run();
  return 0;
}

}  // namespace gpurun::queue

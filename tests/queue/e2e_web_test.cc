// End-to-end: `gpuq web` against a real daemon sampling fake GPUs. Pins the routes (/, /job/ID,
// /api/status, /metrics), 404 for unknown paths, 405 for other methods, 414/431/413/400 for
// oversized or malformed requests, that nothing a user must not see is served (job output, the
// environment), that user-chosen names arrive escaped, that the server gives up root, that it says
// so when the daemon is down, and that hundreds of concurrent connections leave both processes
// bounded (RSS and descriptors measured from /proc) and the page still answering.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"

extern char** environ;
using namespace gpuq_test;

namespace {

using Clock = std::chrono::steady_clock;

// `gpuq web --listen 127.0.0.1:0` for one daemon; the port is read from its first line.
class WebServer {
 public:
  explicit WebServer(const Daemon& d, std::vector<std::string> extra = {}) {
    std::string out = d.dir() + "/web.out";
    std::vector<std::string> args = {gpuq_bin(), "web",      "--listen",  "127.0.0.1:0",
                                     "--socket", d.socket(), "--refresh", "5"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, (d.dir() + "/web.err").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (posix_spawn(&pid_, args[0].c_str(), &fa, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot spawn gpuq web");
    posix_spawn_file_actions_destroy(&fa);
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      std::string text = read_text(out);
      auto at = text.find("127.0.0.1:");
      if (at != std::string::npos && text.find('\n') != std::string::npos) {
        port_ = std::stoi(text.substr(at + 10));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("gpuq web did not say its port within 20 s: " +
                             read_text(d.dir() + "/web.err"));
  }
  ~WebServer() {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

int tcp_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct Response {
  int status = 0;
  std::string head, body;
};

// Sends raw bytes, reads until the server closes (or 10 s pass), and splits the answer.
Response raw(int port, const std::string& request) {
  int fd = tcp_connect(port);
  if (fd < 0) throw std::runtime_error("cannot connect to gpuq web");
  ssize_t ignored = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  (void)ignored;
  std::string text;
  char buf[65536];
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  Response r;
  auto end = text.find("\r\n\r\n");
  r.head = text.substr(0, end);
  r.body = end == std::string::npos ? "" : text.substr(end + 4);
  if (text.rfind("HTTP/1.1 ", 0) == 0) r.status = std::stoi(text.substr(9, 3));
  return r;
}

Response get(int port, const std::string& path, const std::string& method = "GET") {
  return raw(port, fmt::format("{} {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                               method, path));
}

// VmRSS in KiB and open descriptors of a process, from /proc.
std::pair<long, long> rss_and_fds(pid_t pid) {
  long rss = 0;
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stol(line.substr(6));
  long fds = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid)))
    ++fds;
  return {rss, fds};
}

const char* kSleep = "#!/bin/sh\necho \"job output SECRET-OUTPUT-4711\"\nsleep 60\n";

}  // namespace

TEST(GpuqWeb, RoutesMethodsAndRequestLimits) {
  setenv("GPURUN_NVIDIA_SMI",
         (std::string(GPURUN_FIXTURES) + "/nvidia-smi/nvidia-smi-4gpu").c_str(), 1);
  Daemon d({"--sample-interval", "1"});
  unsetenv("GPURUN_NVIDIA_SMI");
  d.script("sleep.sh", kSleep);
  int64_t id = d.submit("--gres=gpu:1 -J '<i>x</i>' sleep.sh");
  d.wait_state(id, "RUNNING");
  WebServer w(d);
  Response page = get(w.port(), "/");
  ASSERT_EQ(page.status, 200) << page.head;
  EXPECT_NE(page.head.find("Content-Type: text/html; charset=utf-8"), std::string::npos);
  EXPECT_NE(page.head.find("Content-Security-Policy: default-src 'none'"), std::string::npos);
  EXPECT_NE(page.body.find("&lt;i&gt;x&lt;/i&gt;"), std::string::npos);
  EXPECT_EQ(page.body.find("<i>x</i>"), std::string::npos);
  EXPECT_EQ(get(w.port(), "/?refresh=1").status, 200);  // a query string is ignored
  Response api = get(w.port(), "/api/status");
  ASSERT_EQ(api.status, 200);
  EXPECT_NE(api.head.find("Content-Type: application/json"), std::string::npos);
  auto status = nlohmann::json::parse(api.body);
  EXPECT_EQ(status["gpus"].size(), 4u);
  EXPECT_EQ(status["running"][0]["name"], "<i>x</i>");  // JSON carries the real name
  Response metrics = get(w.port(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.head.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_EQ(get(w.port(), fmt::format("/job/{}", id)).status, 200);
  for (const char* missing : {"/nope", "/job/999", "/job/abc", "/job/", "/job/1/../..",
                              "/api/status/x", "/favicon.ico", "/../etc/passwd"})
    EXPECT_EQ(get(w.port(), missing).status, 404) << missing;
  for (const char* m : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    Response r = get(w.port(), "/", m);
    EXPECT_EQ(r.status, 405) << m;
    EXPECT_NE(r.head.find("Allow: GET, HEAD"), std::string::npos) << r.head;
  }
  Response head = get(w.port(), "/api/status", "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_NE(head.head.find("Content-Length: "), std::string::npos);
  EXPECT_EQ(get(w.port(), "/" + std::string(20000, 'a')).status, 414);
  EXPECT_EQ(
      raw(w.port(), "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'b') + "\r\n\r\n")
          .status,
      431);
  EXPECT_EQ(raw(w.port(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" +
                              std::string(100000, 'c'))
                .status,
            413);
  EXPECT_EQ(raw(w.port(), "HELLO THERE\r\n\r\n").status, 400);
  EXPECT_EQ(raw(w.port(), "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n").status, 400);
  EXPECT_EQ(get(w.port(), "/").status, 200) << "the server survives bad requests";
}

TEST(GpuqWeb, ServesNoJobOutputNoEnvironmentAndGivesUpRoot) {
  Daemon d;
  d.script("sleep.sh", kSleep);
  int64_t id = d.submit("--gres=gpu:1 sleep.sh");
  d.wait_state(id, "RUNNING");
  Result with_env =
      sh(fmt::format("cd {} && SECRET_ENV=SECRET-ENV-0815 {} submit --gres=gpu:1 "
                     "sleep.sh",
                     d.dir(), d.cli()));
  ASSERT_EQ(with_env.rc, 0) << with_env.err;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (read_text(fmt::format("{}/slurm-{}.out", d.dir(), id)).empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(read_text(fmt::format("{}/slurm-{}.out", d.dir(), id)), "") << "the job wrote nothing";
  // A job that cannot start: its reason names the folder ("chdir <dir>/gone: ..."), for gpuq show.
  int64_t failed = d.submit(fmt::format("-D {}/gone --gres=gpu:1 sleep.sh", d.dir()));
  ASSERT_EQ(d.wait_final(failed)["state"], "FAILED");
  ASSERT_NE(d.show(failed)["reason"].get<std::string>().find(d.dir()), std::string::npos);
  WebServer w(d);
  for (std::string path : {std::string("/"), std::string("/api/status"), std::string("/metrics"),
                           fmt::format("/job/{}", id), fmt::format("/job/{}", id + 1),
                           fmt::format("/job/{}", failed)}) {
    Response r = get(w.port(), path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.body.find("SECRET-OUTPUT-4711"), std::string::npos) << path;
    EXPECT_EQ(r.body.find("SECRET-ENV-0815"), std::string::npos) << path;
    EXPECT_EQ(r.body.find(d.dir()), std::string::npos) << path << ": a path was served";
  }
  if (geteuid() == 0) {
    std::ifstream in(fmt::format("/proc/{}/status", w.pid()));
    std::string line;
    while (std::getline(in, line) && line.rfind("Uid:", 0) != 0) {
    }
    EXPECT_EQ(line.find("\t0\t"), std::string::npos) << "gpuq web still runs as root: " << line;
  }
  d.stop();
  Response down = get(w.port(), "/");
  EXPECT_EQ(down.status, 503);
  EXPECT_NE(down.body.find("cannot reach the gpuq daemon at " + d.socket()), std::string::npos)
      << down.body;
  d.start();
  EXPECT_EQ(get(w.port(), "/").status, 200) << "back once the daemon is";
}

// /job/ARRAY_ID lists the array's tasks, each a link to its own page, with its state; a task's
// page is the job page. Before, the array's id was a 404.
TEST(GpuqWeb, AnArraysPageListsItsTasks) {
  Daemon d;
  d.script("task.sh", "#!/bin/sh\n[ \"$SLURM_ARRAY_TASK_ID\" = 1 ] && exit 3\ntrue\n");
  const int64_t arr = d.submit("--array=0-1 -J '<b>arr</b>' task.sh");
  d.wait_final(arr);
  d.wait_final(arr + 1);
  WebServer w(d);
  Response page = get(w.port(), fmt::format("/job/{}", arr));
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_NE(page.body.find(fmt::format("Array job <span id=\"job-id\">{}</span>: 2 tasks", arr)),
            std::string::npos)
      << page.body;
  for (int task : {0, 1}) {
    const std::string id = fmt::format("{}_{}", arr, task);
    EXPECT_NE(page.body.find(fmt::format("<a class=\"job-id\" href=\"/job/{0}\">{0}</a>", id)),
              std::string::npos)
        << page.body;
    Response one = get(w.port(), "/job/" + id);
    EXPECT_EQ(one.status, 200) << id;
    EXPECT_NE(one.body.find(fmt::format("<span id=\"job-id\">{}</span>", id)), std::string::npos)
        << one.body;
  }
  EXPECT_NE(page.body.find("COMPLETED"), std::string::npos);
  EXPECT_NE(page.body.find("FAILED"), std::string::npos);
  EXPECT_NE(page.body.find("&lt;b&gt;arr&lt;/b&gt;"), std::string::npos);
  EXPECT_EQ(page.body.find("<b>arr</b>"), std::string::npos);
  EXPECT_EQ(page.body.find(d.dir()), std::string::npos) << "a path was served";
}

TEST(GpuqWeb, ListenIsCheckedAndLocalhostByDefault) {
  Daemon d;
  for (const char* bad : {"nonsense", "127.0.0.1", "127.0.0.1:99999", "localhost:80", ":80"}) {
    Result r = d.gpuq(fmt::format("web --listen {}", bad));
    EXPECT_NE(r.rc, 0) << bad;
    EXPECT_NE(r.err.find("expected ADDRESS:PORT"), std::string::npos) << r.err;
  }
  EXPECT_NE(d.gpuq("web --help").out.find("(=127.0.0.1:8080)"), std::string::npos);
}

TEST(GpuqWeb, HundredsOfConnectionsStayBounded) {
  Daemon d;
  WebServer w(d);
  ASSERT_EQ(get(w.port(), "/").status, 200);
  auto [web_rss0, web_fds0] = rss_and_fds(w.pid());
  auto [d_rss0, d_fds0] = rss_and_fds(d.pid());
  // 300 idle TCP connections to the page (more than its 256 at once) and 300 to the daemon's
  // socket (it serves 512 at once), plus 40 page loads at the same time.
  std::vector<int> held;
  for (int i = 0; i < 300; ++i) {
    int fd = tcp_connect(w.port());
    if (fd >= 0) held.push_back(fd);
  }
  for (int i = 0; i < 300; ++i) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", d.socket().c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) held.push_back(fd);
  }
  std::vector<std::thread> loads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 40; ++i) loads.emplace_back([&] { ok += get(w.port(), "/").status == 200; });
  for (auto& t : loads) t.join();
  EXPECT_EQ(ok.load(), 40) << "page loads failed while idle connections were held";
  auto t0 = Clock::now();
  EXPECT_EQ(get(w.port(), "/metrics").status, 200);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  auto [web_rss1, web_fds1] = rss_and_fds(w.pid());
  auto [d_rss1, d_fds1] = rss_and_fds(d.pid());
  EXPECT_LE(web_fds1, web_fds0 + 256 + 8) << "the page server holds more than its cap";
  EXPECT_LE(d_fds1, d_fds0 + 512 + 8);
  EXPECT_LT(web_rss1 - web_rss0, 32 * 1024) << "KiB: the page server grew with connections";
  EXPECT_LT(d_rss1 - d_rss0, 32 * 1024) << "KiB: the daemon grew with connections";
  fmt::print(
      "web: {} KiB, {} fds idle -> {} KiB, {} fds with 300 connections; daemon: {} KiB, "
      "{} fds -> {} KiB, {} fds\n",
      web_rss0, web_fds0, web_rss1, web_fds1, d_rss0, d_fds0, d_rss1, d_fds1);
  for (int fd : held) ::close(fd);
  // Everything is let go: the page server at once, the daemon's idle clients after its 10 s.
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline &&
         (rss_and_fds(w.pid()).second > web_fds0 + 4 || rss_and_fds(d.pid()).second > d_fds0 + 4))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LE(rss_and_fds(w.pid()).second, web_fds0 + 4) << "descriptors left open by gpuq web";
  EXPECT_LE(rss_and_fds(d.pid()).second, d_fds0 + 4) << "descriptors left open by the daemon";
  EXPECT_EQ(get(w.port(), "/").status, 200);
}

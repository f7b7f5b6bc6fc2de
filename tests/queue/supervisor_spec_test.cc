// Pins the supervisor spec (launcher/queue/src/supervise/supervisor_spec.h), the file the daemon
// writes for each job's supervisor: one struct, written and read whole; every field checked on
// reading, an error naming the file and the field; a file of another version refused by version.
// And the attach sockets' listing the daemon reads to find gpuq run clients that went away.
#include "supervise/supervisor_spec.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "supervise/attach.h"

using namespace gpurun::queue;

namespace {

SupervisorSpec sample() {
  SupervisorSpec s;
  s.job_id = 42;
  s.uid = 4294967294u;  // nobody's 65534 elsewhere; the top of the range must survive
  s.gid = 100;
  s.user = "alice";
  s.host = "gpubox";
  s.umask = 027;
  s.cwd = "/home/alice/w";
  s.script_path = "/var/lib/gpuq/spool/42.sh";
  s.script = "#!/bin/sh\necho \xc3\xa9\n";
  s.args = {"a b", ""};
  s.env = {{"PATH", "/bin"}, {"EMPTY", ""}};
  s.output = "/home/alice/w/slurm-42.out";
  s.error = "";
  s.start_ms = 1764000000000;
  s.time_limit_s = 3600;
  s.signal = {10, 90, true};
  s.kill_wait_s = 5;
  s.drop_privileges = true;
  return s;
}

class TempFile {
 public:
  TempFile() {
    char tmpl[] = "/tmp/gpuq-spec-XXXXXX";
    const int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  void write(const std::string& text) const { std::ofstream(path_, std::ios::trunc) << text; }

 private:
  std::string path_;
};

std::string read_error(const std::string& path) {
  try {
    read_spec(path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Every byte value, alone and among others, comes back from the spec as it went in: a script,
// an argument and an environment value of any bytes (a UTF-8 one stays a plain string).
TEST(SupervisorSpec, AnyBytesTravelByteForByte) {
  SupervisorSpec s = sample();
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  s.script = "#!/bin/sh\n# " + all + "\n";
  // Not UTF-8 for JSON though glibc's iconv lets them pass: past U+10FFFF, a lead byte past F4,
  // a surrogate, an overlong NUL, a cut sequence.
  s.args = {all,
            "caf\xe9",
            "caf\xc3\xa9",
            "",
            "\xf4\x90\x80\x80",
            "\xf5\x80\x80\x80",
            "\xed\xa0\x80",
            "\xc0\x80",
            "\xc3"};
  for (int b = 0; b < 256; ++b) s.env[fmt::format("B{}", b)] = std::string(1, static_cast<char>(b));
  TempFile f;
  write_spec(f.path(), s);
  const SupervisorSpec r = read_spec(f.path());
  EXPECT_EQ(r.script, s.script);
  EXPECT_EQ(r.args, s.args);
  EXPECT_EQ(r.env, s.env);
  const nlohmann::json j = spec_to_json(s);
  EXPECT_NO_THROW((void)j.dump()) << "every value is JSON text";
  EXPECT_EQ(j["args"][2], "caf\xc3\xa9") << "UTF-8 stays a string";
  EXPECT_EQ(j["args"][1], nlohmann::json({{"latin1", "caf\xc3\xa9"}}));
}

TEST(SupervisorSpec, WrittenAndReadWhole) {
  const SupervisorSpec s = sample();
  TempFile f;
  write_spec(f.path(), s);
  struct stat st {};
  ASSERT_EQ(stat(f.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const SupervisorSpec r = read_spec(f.path());
  EXPECT_EQ(r.job_id, s.job_id);
  EXPECT_EQ(r.uid, s.uid);
  EXPECT_EQ(r.gid, s.gid);
  EXPECT_EQ(r.user, s.user);
  EXPECT_EQ(r.host, s.host);
  EXPECT_EQ(r.umask, s.umask);
  EXPECT_EQ(r.cwd, s.cwd);
  EXPECT_EQ(r.script_path, s.script_path);
  EXPECT_EQ(r.script, s.script);
  EXPECT_EQ(r.args, s.args);
  EXPECT_EQ(r.env, s.env);
  EXPECT_EQ(r.output, s.output);
  EXPECT_EQ(r.error, s.error);
  EXPECT_EQ(r.start_ms, s.start_ms);
  EXPECT_EQ(r.time_limit_s, s.time_limit_s);
  EXPECT_EQ(r.signal.signal, 10);
  EXPECT_EQ(r.signal.lead_seconds, 90);
  EXPECT_TRUE(r.signal.batch_only);
  EXPECT_EQ(r.kill_wait_s, 5);
  EXPECT_TRUE(r.drop_privileges);
  EXPECT_EQ(spec_to_json(r), spec_to_json(s));
  EXPECT_TRUE(r.attach.socket.empty());  // a batch job
}

// gpuq run's job: the attach socket and token travel to the supervisor, checked on reading.
TEST(SupervisorSpec, AnAttachTravelsAndIsChecked) {
  SupervisorSpec s = sample();
  s.attach = {"gpuq-run-0-ab12", std::string(32, 'f'), true};
  TempFile f;
  write_spec(f.path(), s);
  const SupervisorSpec r = read_spec(f.path());
  EXPECT_EQ(r.attach.socket, "gpuq-run-0-ab12");
  EXPECT_EQ(r.attach.token, std::string(32, 'f'));
  EXPECT_TRUE(r.attach.pty);
  nlohmann::json o = spec_to_json(s);
  o["attach"]["socket"] = "/run/gpuq.sock";
  f.write(o.dump());
  EXPECT_NE(read_error(f.path()).find("field 'attach': a bad socket name or token"),
            std::string::npos)
      << read_error(f.path());
  o = spec_to_json(s);
  o["attach"].erase("token");
  f.write(o.dump());
  EXPECT_NE(read_error(f.path()).find("field 'attach.token': expected a string"),
            std::string::npos)
      << read_error(f.path());
}

// The old reader threw nlohmann's "type must be number, but is string", naming neither.
TEST(SupervisorSpec, ABadFieldIsRefusedNamingFileAndField) {
  TempFile f;
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* want;
  };
  const Case cases[] = {
      {"uid", "root", "field 'uid': expected an integer from 0 to 4294967295, got \"root\""},
      {"uid", 4294967296, "field 'uid': expected an integer from 0 to 4294967295"},
      {"job_id", 0, "field 'job_id': expected an integer from 1 to"},
      {"signal", 65, "field 'signal': expected an integer from 0 to 64, got 65"},
      {"umask", 512, "field 'umask': expected an integer from 0 to 511"},
      {"env",
       {{"A", 1}},
       "field 'env': expected a string or {\"latin1\": TEXT} (characters up "
       "to U+00FF) for A, got 1"},
      {"env", {{"A", {{"latin1", "\u0100"}}}}, "field 'env': expected a string or {\"latin1\""},
      {"args", {{{"latin1", 1}}}, "field 'args': expected a list, each a string or {\"latin1\""},
      {"script", {{"base64", "eA=="}}, "field 'script': expected a string or {\"latin1\""},
      {"args", "a", "field 'args': expected a list of strings"},
      {"drop_privileges", 1, "field 'drop_privileges': expected true or false, got 1"},
      {"cwd", nullptr, "field 'cwd': expected a string, got null"},
      {"version", 2, "field 'version': expected an integer from 1 to 1, got 2"},
  };
  for (const auto& c : cases) {
    nlohmann::json o = spec_to_json(sample());
    if (c.value.is_null())
      o.erase(c.key);
    else
      o[c.key] = c.value;
    f.write(o.dump());
    const std::string err = read_error(f.path());
    EXPECT_NE(err.find("job spec " + f.path() + ": " + c.want), std::string::npos)
        << c.key << ": " << err;
  }
  f.write("{\"job_id\":");
  EXPECT_NE(read_error(f.path()).find("job spec " + f.path() + " is not JSON"), std::string::npos);
  f.write("[1]");
  EXPECT_NE(read_error(f.path()).find("job spec " + f.path() + ": not a JSON object"),
            std::string::npos);
  EXPECT_NE(read_error(f.path() + ".gone").find("is missing"), std::string::npos);
}

// A spec an older daemon wrote (no "version", no "umask" or "host": its self_exe is this binary
// after an upgrade) has the same fields and is read as version 1.
TEST(SupervisorSpec, AnOlderDaemonsSpecIsRead) {
  nlohmann::json o = spec_to_json(sample());
  o.erase("version");
  o.erase("umask");
  o.erase("host");
  const SupervisorSpec r = spec_from_json(o, "old.spec");
  EXPECT_EQ(r.job_id, 42);
  EXPECT_EQ(r.umask, 022u);
  EXPECT_FALSE(r.host.empty());
}

// The daemon's view of which gpuq run clients still wait (Daemon::cancel_abandoned_runs): the
// listening abstract sockets of /proc/net/unix, and nothing else.
TEST(AttachSockets, OnlyListeningAbstractSocketsAreListed) {
  std::istringstream in(
      "Num       RefCount Protocol Flags    Type St Inode Path\n"
      "0000000000000000: 00000002 00000000 00010000 0001 01 4001 @gpuq-run-1000-ab12\n"
      "0000000000000000: 00000003 00000000 00000000 0001 03 4002 @gpuq-run-1000-cd34\n"
      "0000000000000000: 00000002 00000000 00010000 0001 01 4003 /run/gpuq.sock\n"
      "0000000000000000: 00000003 00000000 00000000 0001 03 4004\n"
      "0000000000000000: 00000002 00000000 0001zz00 0001 01 4005 @gpuq-run-1000-ef56\n"
      "garbage\n"
      "0000000000000000: 00000002 00000000 00010000 0005 01 4006 @gpuq-run-1001-9a\n");
  const std::set<std::string> got = listening_abstract_sockets(in);
  EXPECT_EQ(got, (std::set<std::string>{"gpuq-run-1000-ab12", "gpuq-run-1001-9a"}));
}

TEST(AttachSockets, AListeningSocketOfOursShowsUpAndGoesAway) {
  std::string name;
  {
    AttachListener l = listen_attach(false);
    name = l.spec.socket;
    std::ifstream in("/proc/net/unix");
    ASSERT_TRUE(in) << "no /proc/net/unix";
    EXPECT_EQ(listening_abstract_sockets(in).count(name), 1u) << name;
  }
  std::ifstream in("/proc/net/unix");
  EXPECT_EQ(listening_abstract_sockets(in).count(name), 0u) << name << " still listed";
}

// End-to-end: a real gpuq daemon and the gpuq client as a user runs them. Pins submit/queue/
// show/log/history/cancel round trips, the job environment contract with gpurun, hold/release,
// drain/resume, --help everywhere, and that malformed socket requests never stop the daemon.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>

#include "gpurun/common/posix.h"
#include "harness.h"

using namespace gpuq_test;

TEST(GpuqE2E, SubmitQueueLogHistoryRoundTrip) {
  Daemon d;
  d.script(
      "env.sh",
      "#!/bin/bash\n#SBATCH --job-name=envjob\n#SBATCH --gres=gpu:2\n#SBATCH --mem=4G\n"
      "echo \"ID=$GPUQ_JOB_ID GPUS=$GPUQ_GPUS N=$GPUQ_NUM_GPUS CVD=$CUDA_VISIBLE_DEVICES "
      "ORDER=$CUDA_DEVICE_ORDER PWD=$(pwd) ARG=$1 MINE=$MY_VAR SLURM=${SLURM_JOB_ID:-none}\"\n");
  Result r = sh(fmt::format("cd {} && MY_VAR=captured SLURM_JOB_ID=99 {} submit env.sh hello",
                            d.dir(), d.cli()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted batch job 1\n");
  EXPECT_NE(r.err.find("--mem=4G"), std::string::npos);  // unsupported: warned, ignored
  auto j = d.wait_final(1);
  EXPECT_EQ(j["state"], "COMPLETED");
  EXPECT_EQ(j["name"], "envjob");
  std::string out = read_text(d.dir() + "/slurm-1.out");
  // The submitter's SLURM_JOB_ID (99) is not the job's: gpuq sets its own (issue 25).
  EXPECT_EQ(out, fmt::format("ID=1 GPUS=0,1 N=2 CVD=0,1 ORDER=PCI_BUS_ID PWD={} ARG=hello "
                             "MINE=captured SLURM=1\n",
                             d.dir()));
  EXPECT_EQ(d.gpuq("log 1").out, out);
  Result h = d.gpuq("history");
  EXPECT_NE(h.out.find("JobID           JobName      User      State ExitCode    Elapsed     GPUs"),
            std::string::npos)
      << h.out;
  EXPECT_NE(h.out.find("envjob"), std::string::npos);
  EXPECT_NE(h.out.find("COMPLETED      0:0"), std::string::npos) << h.out;

  // A failing job: FAILED with ExitCode code:0; output pattern letters.
  d.script("fail.sh", "#!/bin/sh\n#SBATCH -o %x-%j.log\necho failing; exit 3\n");
  int64_t id = d.submit("-J bad fail.sh");
  auto f = d.wait_final(id);
  EXPECT_EQ(f["state"], "FAILED");
  EXPECT_EQ(f["exit_code"], 3);
  EXPECT_EQ(f["reason"], "NonZeroExitCode");
  EXPECT_EQ(read_text(fmt::format("{}/bad-{}.log", d.dir(), id)), "failing\n");
  EXPECT_NE(d.gpuq("history").out.find("FAILED      3:0"), std::string::npos);
}

// A job starts with stdin, stdout and stderr and nothing else, as under Slurm: not what whoever
// started the daemon left open without close-on-exec (here fd 42, as a login shell or a CI
// runner leaves some), not the supervisor's own. Before, fd 42 reached every job.
TEST(GpuqE2E, AJobInheritsNoDescriptorButTheStandardThree) {
  gpurun::common::Fd stray(::open("/dev/null", O_RDONLY));  // inheritable, like the starter's
  ASSERT_TRUE(stray);
  ASSERT_EQ(::dup2(stray.get(), 42), 42);
  Daemon d;
  ::close(42);
  // The listing is ls' own (exec), whose one descriptor of its own is the folder it reads, 3.
  d.script("fds.sh", "#!/bin/sh\nexec ls /proc/self/fd\n");
  const int64_t id = d.submit("fds.sh");
  ASSERT_EQ(d.wait_final(id)["state"], "COMPLETED");
  const std::string out = read_text(fmt::format("{}/slurm-{}.out", d.dir(), id));
  EXPECT_EQ(out, "0\n1\n2\n3\n") << out;
}

TEST(GpuqE2E, QueueShowsRunningAndPendingWithReasons) {
  Daemon d({}, "0");
  d.script("sleep.sh", "#!/bin/sh\nsleep 30\n");
  int64_t a = d.submit("--gpus 1 sleep.sh");
  int64_t b = d.submit("--gpus 1 -J waiting sleep.sh");
  int64_t c = d.submit("--hold sleep.sh");
  d.wait_state(a, "RUNNING");
  Result q = d.gpuq("queue");
  ASSERT_EQ(q.rc, 0);
  auto l = lines(q.out);
  ASSERT_EQ(l.size(), 4u) << q.out;
  EXPECT_EQ(l[0], "             JOBID     NAME     USER ST       TIME GPUS NODELIST(REASON)");
  EXPECT_NE(l[1].find(" R "), std::string::npos);
  EXPECT_NE(l[2].find("waiting"), std::string::npos);
  EXPECT_NE(l[2].find("PD"), std::string::npos);
  EXPECT_NE(l[2].find("(Resources)"), std::string::npos) << q.out;
  EXPECT_NE(l[3].find("(JobHeldUser)"), std::string::npos) << q.out;
  auto js = nlohmann::json::parse(d.gpuq("queue --json").out);
  EXPECT_EQ(js.size(), 3u);
  // Cancel: running -> CANCELLED (SIGTERM to the group); pending -> CANCELLED at once.
  ASSERT_EQ(d.gpuq(fmt::format("cancel {} {}", a, c)).rc, 0);
  EXPECT_EQ(d.wait_final(a)["state"], "CANCELLED");
  EXPECT_EQ(d.wait_final(c)["state"], "CANCELLED");
  EXPECT_EQ(d.wait_state(b, "RUNNING")["gpus"], nlohmann::json::array({0}));
  ASSERT_EQ(d.gpuq(fmt::format("cancel {}", b)).rc, 0);
  d.wait_final(b);
  Result bad = d.gpuq("cancel 999");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("invalid job id '999'"), std::string::npos) << bad.err;
}

// As scancel (a user's review): an unknown id among several is reported and the others are
// cancelled (before, nothing was, with the same error as when one id was bad); -u, --me and -t
// select jobs, so a student can clear their own pending jobs.
TEST(GpuqE2E, CancelGoesOnPastAnUnknownIdAndSelectsByUserAndState) {
  Daemon d({}, "0");
  d.script("sleep.sh", "#!/bin/sh\nsleep 30\n");
  const int64_t run = d.submit("--gpus 1 sleep.sh");
  const int64_t pend1 = d.submit("--gpus 1 sleep.sh"), pend2 = d.submit("--gpus 1 sleep.sh");
  d.wait_state(run, "RUNNING");
  Result r = d.gpuq(fmt::format("cancel {} 99999 {}_4", pend1, run));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("cannot cancel job 99999: invalid job id"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(fmt::format("cannot cancel job {}_4: invalid job id", run)),
            std::string::npos)
      << r.err;
  EXPECT_EQ(d.wait_final(pend1)["state"], "CANCELLED");
  Result one_bad = d.gpuq("cancel 99999");
  EXPECT_NE(one_bad.rc, 0);
  EXPECT_NE(one_bad.err.find("invalid job id '99999'"), std::string::npos) << one_bad.err;

  ASSERT_EQ(d.gpuq("cancel --me -t PD").rc, 0);  // the pending one, not the running one
  EXPECT_EQ(d.wait_final(pend2)["state"], "CANCELLED");
  EXPECT_EQ(d.show(run)["state"], "RUNNING");
  const std::string me = d.show(run)["user"];
  ASSERT_EQ(d.gpuq("cancel -u " + me).rc, 0);
  EXPECT_EQ(d.wait_final(run)["state"], "CANCELLED");
  EXPECT_EQ(d.gpuq("cancel --me").rc, 0) << "nothing selected: nothing to do, as scancel";
  EXPECT_NE(d.gpuq("cancel").err.find("no job id given"), std::string::npos);
  // An array's first task has the array's id: -t R cancels that task, not the pending rest.
  const int64_t arr = d.submit("--array=0-1 --gpus 1 sleep.sh");
  d.wait_state(arr, "RUNNING");
  ASSERT_EQ(d.gpuq("cancel --me -t R").rc, 0);
  EXPECT_EQ(d.wait_final(arr)["state"], "CANCELLED");
  EXPECT_EQ(d.wait_state(arr + 1, "RUNNING")["state"], "RUNNING") << "the pending task was cancelled";
  ASSERT_EQ(d.gpuq(fmt::format("cancel {}", arr)).rc, 0);
}

// The README says clients find the daemon through --socket: before the command too (a user's
// review: `gpuq --socket S budget` was "unknown command '--socket'").
TEST(GpuqE2E, SocketOptionBeforeTheCommand) {
  Daemon d;
  for (const std::string& opt : {"--socket " + d.socket(), "--socket=" + d.socket()}) {
    Result r = sh(fmt::format("env -u GPUQ_SOCKET {} {} queue", gpuq_bin(), opt));
    EXPECT_EQ(r.rc, 0) << opt << ": " << r.err;
    EXPECT_NE(r.out.find("JOBID"), std::string::npos) << r.out;
  }
  EXPECT_EQ(sh(gpuq_bin() + " --socket").rc, 2);
}

TEST(GpuqE2E, HoldReleaseDrainResume) {
  Daemon d;
  d.script("quick.sh", "#!/bin/sh\necho ok\n");
  int64_t a = d.submit("-H quick.sh");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(d.show(a)["state"], "PENDING");
  ASSERT_EQ(d.gpuq(fmt::format("release {}", a)).rc, 0);
  EXPECT_EQ(d.wait_final(a)["state"], "COMPLETED");
  ASSERT_EQ(d.gpuq("drain").rc, 0);
  int64_t b = d.submit("quick.sh");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto j = d.show(b);
  EXPECT_EQ(j["state"], "PENDING");
  EXPECT_EQ(j["reason"], "ReqNodeNotAvail");
  d.kill9();  // the drain is durable
  d.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(d.show(b)["state"], "PENDING");
  ASSERT_EQ(d.gpuq("resume").rc, 0);
  EXPECT_EQ(d.wait_final(b)["state"], "COMPLETED");
}

TEST(GpuqE2E, HelpOnEverySubcommandAndClearErrors) {
  Daemon d;
  for (const char* c : {"submit", "queue", "cancel", "show", "log", "history", "hold", "release",
                        "drain", "resume", "daemon"}) {
    Result r = d.gpuq(fmt::format("{} --help", c));
    EXPECT_EQ(r.rc, 0) << c << ": " << r.err;
    EXPECT_NE(r.out.find("usage: gpuq"), std::string::npos) << c;
  }
  d.script("nosheb.sh", "echo no shebang\n");
  Result r = sh(fmt::format("cd {} && {} submit nosheb.sh", d.dir(), d.cli()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("#!"), std::string::npos) << r.err;
  d.script("five.sh", "#!/bin/sh\n#SBATCH --gres=gpu:5\n");
  r = sh(fmt::format("cd {} && {} submit five.sh", d.dir(), d.cli()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("5 GPUs"), std::string::npos) << r.err;
  r = sh(fmt::format("cd {} && {} submit --time=xyz five.sh", d.dir(), d.cli()));
  EXPECT_NE(r.err.find("'xyz'"), std::string::npos) << r.err;
  d.script("one.sh", "#!/bin/sh\n");
  r = sh(fmt::format("cd {} && {} submit --dependency=afterok:4242 one.sh", d.dir(), d.cli()));
  EXPECT_NE(r.err.find("4242"), std::string::npos) << r.err;
  r = sh(fmt::format("GPUQ_SOCKET={}/nope {} queue", d.dir(), gpuq_bin()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("cannot connect"), std::string::npos) << r.err;
  EXPECT_NE(d.gpuq("frobnicate").rc, 0);
}

namespace {
// Sends raw bytes and returns the daemon's reply payload ("" if it closed without one).
std::string raw_request(const std::string& socket, const std::string& bytes, bool half_close) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, socket.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "<connect failed>";
  }
  ssize_t w = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  (void)w;
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string reply;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) reply.append(buf, n);
  ::close(fd);
  return reply.size() > 4 ? reply.substr(4) : "";
}

std::string framed(const std::string& s) {
  uint32_t n = s.size();
  std::string h{char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
  return h + s;
}
}  // namespace

TEST(GpuqE2E, MalformedAndOversizedRequestsGetErrorsNotCrashes) {
  Daemon d;
  const std::string s = d.socket();
  EXPECT_NE(raw_request(s, std::string("\xff\xff\xff\xff", 4), false).find("larger than the limit"),
            std::string::npos);
  EXPECT_NE(raw_request(s, framed("{not json"), false).find("malformed request"),
            std::string::npos);
  EXPECT_NE(raw_request(s, framed("[1,2]"), false).find("not a JSON object"), std::string::npos);
  EXPECT_NE(raw_request(s, framed("{\"op\":5}"), false).find("\"ok\":false"), std::string::npos);
  EXPECT_NE(raw_request(s, framed("{\"op\":\"submit\"}"), false).find("\"ok\":false"),
            std::string::npos);
  EXPECT_NE(raw_request(s, framed("{\"op\":\"cancel\",\"ids\":[{\"a\":1}]}"), false)
                .find("invalid job id"),
            std::string::npos);
  EXPECT_NE(
      raw_request(
          s, framed("{\"op\":\"submit\",\"script\":\"#!/bin/sh\\n\",\"cwd\":\"/\",\"env\":[1]}"),
          false)
          .find("\"ok\":false"),
      std::string::npos);
  // A silent client must not block others.
  int idle = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, s.c_str());
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::send(idle, "\0\0", 2, MSG_NOSIGNAL), 2);  // half a header, then nothing
  EXPECT_EQ(d.gpuq("queue --noheader").rc, 0);
  // Random garbage, truncated frames and early hang-ups.
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string junk(rng() % 64, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    if (i % 3 == 0) junk = framed(junk);
    raw_request(s, junk, true);
  }
  ::close(idle);
  Result r = d.gpuq("queue --noheader");
  EXPECT_EQ(r.rc, 0) << r.err;
  d.script("q.sh", "#!/bin/sh\necho fine\n");
  EXPECT_EQ(d.wait_final(d.submit("q.sh"))["state"], "COMPLETED");
}

TEST(GpuqE2E, LogFollowPrintsUntilTheJobEnds) {
  Daemon d;
  d.script("talk.sh", "#!/bin/sh\necho first\nsleep 1\necho second\n");
  int64_t id = d.submit("talk.sh");
  Result r = d.gpuq(fmt::format("log -f {}", id));  // returns only once the job has ended
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "first\nsecond\n");
  EXPECT_EQ(d.show(id)["state"], "COMPLETED");
}

TEST(GpuqE2E, OneDaemonPerStateDirectory) {
  Daemon d;
  Result r = sh(fmt::format("{} daemon --gpus 0 --state-dir {}/state --socket {}/other.sock",
                            gpuq_bin(), d.dir(), d.dir()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("another gpuq daemon"), std::string::npos) << r.err;
  EXPECT_EQ(d.gpuq("queue --noheader").rc, 0);
}

// A daemon of another state directory on the same socket path is refused: it used to take the
// path over, and remove it when it ended, leaving the first daemon (and its jobs) unreachable.
// A stale socket file (a killed daemon's) is still taken over.
TEST(GpuqE2E, OneDaemonPerSocket) {
  Daemon d;
  Result r = sh(fmt::format("timeout 20 {} daemon --gpus 0 --state-dir {}/state2 --socket {}",
                            gpuq_bin(), d.dir(), d.socket()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("another gpuq daemon answers on " + d.socket()), std::string::npos) << r.err;
  EXPECT_EQ(d.gpuq("queue --noheader").rc, 0) << "the first daemon is no longer reachable";

  const std::string stale = d.dir() + "/stale.sock";
  ASSERT_EQ(sh(fmt::format("python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                           "s.bind('{}')\"",
                           stale))
                .rc,
            0);
  Result s = sh(fmt::format(
      "timeout -s INT 3 {} daemon --gpus 0 --state-dir {}/state3 --socket {}; test ! -e {}",
      gpuq_bin(), d.dir(), stale, stale));
  EXPECT_EQ(s.rc, 0) << "a stale socket was not taken over (and removed at the end): " << s.err;
}

// A script, its arguments and its environment's values reach the job as the bytes they are, as
// sbatch passes them, UTF-8 or not (a Latin-1 comment or value was refused before), and they
// survive the daemon's restart. What gpuq keeps as text must be UTF-8 and is refused before
// anything is sent, naming it: an #SBATCH line (the job's name, paths) and an environment name.
TEST(GpuqE2E, NonUtf8BytesReachTheJobAndSurviveARestart) {
  Daemon d;
  // Latin-1 in a comment, in the output, in an argument and in an environment value.
  d.script(
      "latin1.sh",
      "#!/bin/sh\n# caf\xe9 cr\xe8me\nprintf '%s|%s|%s\\n' \"caf\xe9\" \"$1\" \"$GPUQ_TEST_L1\"\n");
  const std::string submit = fmt::format(
      "cd {} && env GPUQ_TEST_L1=$(printf 'v\\351\\377') {} submit --hold latin1.sh "
      "$(printf 'a\\351\\377')",
      d.dir(), d.cli());
  Result r = sh(submit);
  ASSERT_EQ(r.rc, 0) << r.err;
  const int64_t id = std::stoll(r.out.substr(r.out.rfind(' ') + 1));
  const nlohmann::json shown = d.show(id);  // `gpuq show --json` of a job with such bytes
  EXPECT_EQ(shown["args"][0], nlohmann::json({{"latin1", "a\u00e9\u00ff"}})) << shown.dump();
  d.stop();
  d.start();  // the job comes back from the store
  ASSERT_EQ(d.gpuq(fmt::format("release {}", id)).rc, 0);
  EXPECT_EQ(d.wait_final(id)["state"], "COMPLETED");
  EXPECT_EQ(d.output(id), "caf\xe9|a\xe9\xff|v\xe9\xff\n");
  EXPECT_EQ(sh(fmt::format("cd {} && env GPUQ_TEST_L1=$(printf 'v\\351') {} run -- sh -c "
                           "'printf %s \"$GPUQ_TEST_L1\"'",
                           d.dir(), d.cli()))
                .out,
            "v\xe9")
      << "gpuq run";
  const std::string name_sh = d.script("name.sh", "#!/bin/sh\n#SBATCH -J caf\xe9\ntrue\n");
  const std::string ok_sh = d.script("ok.sh", "#!/bin/sh\ntrue\n");
  const std::string latin1_name = d.script("caf\xe9.sh", "#!/bin/sh\ntrue\n");
  d.expect_refused(
      {{"submit " + name_sh, "name.sh line 2 is not UTF-8 (byte 0xe9): its #SBATCH options"},
       {"submit -J $(printf 'n\\351') " + ok_sh, "an option's value is not UTF-8"},
       {"submit " + latin1_name, "the script's or program's name is not UTF-8 (byte 0xe9)"}});
  const std::string bad_name =
      fmt::format("cd {} && env $(printf 'B\\377')=1 {} ", d.dir(), d.cli());
  Result env = sh(bad_name + "submit ok.sh");
  EXPECT_NE(env.rc, 0);
  EXPECT_NE(env.err.find("the name of an environment variable is not UTF-8 (byte 0xff)"),
            std::string::npos)
      << env.err;
  EXPECT_NE(sh(bad_name + "run true").err.find("the name of an environment variable"),
            std::string::npos)
      << "gpuq run says so too";
  // --export=NONE leaves that variable behind: nothing to refuse.
  Result none = sh(bad_name + "submit --parsable --export=NONE ok.sh");
  ASSERT_EQ(none.rc, 0) << none.err;
  EXPECT_EQ(d.wait_final(std::stoll(none.out))["state"], "COMPLETED");
  EXPECT_EQ(d.gpuq("queue --noheader").out, "") << "a refused submission left a job";
}

// sbatch's --wrap runs a command as a /bin/sh script; an option gpuq does not know as sbatch's
// is an error at once (it took the script's name as its value, then waited for a script on
// stdin); sbatch's -Q is ignored.
TEST(GpuqE2E, WrapAndUnknownOptions) {
  Daemon d;
  Result w = sh(fmt::format("cd {} && {} submit --parsable --wrap='echo wrapped $((6 * 7))'",
                            d.dir(), d.cli()));
  ASSERT_EQ(w.rc, 0) << w.err;
  int64_t id = std::stoll(w.out);
  EXPECT_EQ(d.wait_final(id)["state"], "COMPLETED");
  EXPECT_EQ(read_text(fmt::format("{}/slurm-{}.out", d.dir(), id)), "wrapped 42\n");
  d.script("plain.sh", "#!/bin/sh\ntrue\n");
  Result q = sh(fmt::format("cd {} && sleep 3 | timeout 2 env {} submit --frobnicate plain.sh",
                            d.dir(), d.cli()));
  EXPECT_NE(q.rc, 0);
  EXPECT_NE(q.rc, 124) << "gpuq submit waited for a script on stdin";
  EXPECT_NE(q.err.find("unknown option '--frobnicate'"), std::string::npos) << q.err;
  Result quiet = sh(fmt::format("cd {} && {} submit -Q plain.sh", d.dir(), d.cli()));
  EXPECT_EQ(quiet.rc, 0) << "sbatch's -Q (--quiet) is ignored, not an error: " << quiet.err;
  Result both = sh(fmt::format("cd {} && {} submit --wrap=true plain.sh", d.dir(), d.cli()));
  EXPECT_NE(both.rc, 0);
  EXPECT_NE(both.err.find("--wrap takes the place of a script"), std::string::npos) << both.err;
}

// What sbatch refuses at submission is refused here too, instead of a FAILED job later: DOS line
// breaks, an interpreter that does not exist; a script over the request limit says so (it was
// "Broken pipe"); history -n -1 is an error (it listed everything).
TEST(GpuqE2E, UnrunnableScriptsAreRefusedAtSubmit) {
  Daemon d;
  d.script("dos.sh", "#!/bin/sh\r\necho hi\r\n");
  Result dos = sh(fmt::format("cd {} && {} submit dos.sh", d.dir(), d.cli()));
  EXPECT_NE(dos.rc, 0);
  EXPECT_NE(dos.err.find("dos.sh has DOS line breaks"), std::string::npos) << dos.err;
  d.script("nointerp.sh", "#!/bin/no-such-shell\necho hi\n");
  Result ni = sh(fmt::format("cd {} && {} submit nointerp.sh", d.dir(), d.cli()));
  EXPECT_NE(ni.rc, 0);
  EXPECT_NE(ni.err.find("the interpreter '/bin/no-such-shell' of its #! line does not exist"),
            std::string::npos)
      << ni.err;
  Result big = sh(fmt::format(
      "cd {} && {{ echo '#!/bin/sh'; head -c 9000000 /dev/zero | tr '\\0' '#'; }} > big.sh && "
      "{} submit big.sh",
      d.dir(), d.cli()));
  EXPECT_NE(big.rc, 0);
  EXPECT_NE(big.err.find("more than gpuq's limit of 8 MiB"), std::string::npos) << big.err;
  Result h = d.gpuq("history -n -1");
  EXPECT_NE(h.rc, 0);
  EXPECT_NE(h.err.find("-n -1: expected 0 or more"), std::string::npos) << h.err;
  EXPECT_EQ(d.gpuq("queue --noheader").out, "") << "a refused submission left a job";
}

// --gpus '' (an unset variable in a unit file) is an error; a CPU-only queue says --gpus none.
TEST(GpuqE2E, EmptyGpuListIsRefused) {
  TempDir dir;
  Result r = sh(fmt::format("{} daemon --gpus '' --state-dir {}/s --socket {}/q.sock", gpuq_bin(),
                            dir.path(), dir.path()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--gpus '': expected GPU ids (0,1,...), or none"), std::string::npos)
      << r.err;
  Daemon cpu({}, "none");
  cpu.script("cpu.sh", "#!/bin/sh\ntrue\n");
  EXPECT_EQ(cpu.wait_final(cpu.submit("cpu.sh"))["state"], "COMPLETED");
}

// Two options a review found lost: --gpus-per-task (ignored with a warning: the job got no GPU)
// and a typo of --gres in an #SBATCH line (a warning: the job ran without its GPUs). Now the
// first gives N GPUs per task, and the typo refuses the script, naming the line and the option
// meant; nothing is queued.
TEST(GpuqE2E, GpusPerTaskCountsAndATypoOfGresIsRefused) {
  Daemon d;
  const int64_t id = d.submit("--gpus-per-task=1 -n 2 --wrap 'echo gpus=$CUDA_VISIBLE_DEVICES'");
  auto j = d.wait_final(id);
  EXPECT_EQ(j["state"], "COMPLETED");
  EXPECT_EQ(j["gpus"].size(), 2u) << j.dump();
  d.script("typo.sh", "#!/bin/sh\n#SBATCH -J train\n#SBATCH --gress=gpu:2\necho hi\n");
  Result r = sh(fmt::format("cd {} && {} submit typo.sh", d.dir(), d.cli()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("#SBATCH line 3: unknown option '--gress=gpu:2' (did you mean --gres?)"),
            std::string::npos)
      << r.err;
  Result q = d.gpuq("history -a --json");
  EXPECT_EQ(nlohmann::json::parse(q.out).size(), 1u) << q.out;
}

// --export reaches the job as sbatch's does (it was ignored with a warning: LR stayed unset, and
// NONE passed the submitter's whole environment, tokens with it).
TEST(GpuqE2E, ExportChoosesWhatTheJobSees) {
  Daemon d;
  const std::string job = "--wrap 'echo lr=${LR-unset} tok=${TOKEN-unset} path=$PATH'";
  const int64_t all = d.submit("--export=ALL,LR=0.1 " + job, "TOKEN=t");
  const int64_t some = d.submit("--export=LR=0.2 " + job, "TOKEN=t");
  const int64_t nil =
      d.submit("--export=NIL --wrap 'echo home=${HOME-unset} job=${SLURM_JOB_ID:+set} path=$PATH'",
               "TOKEN=t");
  for (const int64_t id : {all, some, nil}) EXPECT_EQ(d.wait_final(id)["state"], "COMPLETED");
  EXPECT_EQ(d.output(nil), fmt::format("home=unset job=set path={}/state/bin:/usr/local/bin:"
                                       "/usr/bin:/bin\n",
                                       d.dir()));
  const std::string first = d.output(all);
  EXPECT_EQ(first.rfind("lr=0.1 tok=t ", 0), 0u) << first;
  EXPECT_EQ(d.output(some),
            fmt::format("lr=0.2 tok=unset path={}/state/bin:/usr/local/bin:/usr/bin:/bin\n",
                        d.dir()));  // gpuq's srun first
}

// --open-mode=append, as sbatch's (it was ignored with a warning: of two jobs writing one file,
// the second truncated the first's output); truncate stays the default.
TEST(GpuqE2E, OpenModeAppendKeepsEarlierOutput) {
  Daemon d;
  for (int k = 1; k <= 2; ++k)
    d.wait_final(d.submit(fmt::format("-o same.out --open-mode=append --wrap 'echo job {}'", k)));
  EXPECT_EQ(read_text(d.dir() + "/same.out"), "job 1\njob 2\n");
  d.wait_final(d.submit("-o same.out --wrap 'echo job 3'"));
  EXPECT_EQ(read_text(d.dir() + "/same.out"), "job 3\n");
  Result bad = d.gpuq("submit --open-mode=sometimes --wrap true");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--open-mode 'sometimes': expected append or truncate"), std::string::npos)
      << bad.err;
}

// Common mistakes get an error that says what is wrong with the input (a review found these
// unclear: "'' is not a number" for --time=-1, "does not look like a batch script" for a
// directory, no reason for a missing script, and `queue -u` with a misspelt user exited 0 with
// nothing listed); Slurm's INFINITE is accepted in any case.
TEST(GpuqE2E, CommonMistakesAreNamed) {
  Daemon d;
  d.script("nosheb.sh", "echo hi\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Which script has no #! line, or that there was none at all (a user's review).
      {fmt::format("submit {}/nosheb.sh", d.dir()),
       fmt::format("{}/nosheb.sh: this does not look like a batch script", d.dir())},
      {"submit < /dev/null", "no script given, and standard input was empty"},
      {"submit --time=-1 --wrap true",
       "time limit '-1': expected M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"},
      {"submit /tmp", "'/tmp' is a directory: expected a batch script (a file)"},
      {"submit /nonexistent-gpuq.sh",
       "cannot read script '/nonexistent-gpuq.sh': No such file or directory"},
      {"submit --array=0-3% --wrap true",
       "--array '0-3%': the %limit '' must be a whole number from 1 to 100000"},
      {"queue -u no-such-user-gpuq", "gpuq queue -u 'no-such-user-gpuq': no such user"},
      {"history -u no-such-user-gpuq", "gpuq history -u 'no-such-user-gpuq': no such user"}};
  d.expect_refused(cases);
  const int64_t id = d.submit("--time=infinite --wrap true");
  EXPECT_EQ(d.wait_final(id)["time_limit_s"], 0);
}

// squeue's -j and -t, sacct's -j, and `show` of several jobs, as a Slurm user types them.
TEST(GpuqE2E, QueueHistoryAndShowTakeJobIdsAndStates) {
  Daemon d({}, "0");
  d.script("sleep.sh", "#!/bin/sh\nsleep 30\n");
  const int64_t run = d.submit("--gpus 1 sleep.sh");
  const int64_t wait = d.submit("--gpus 1 -J waiting sleep.sh");
  const int64_t arr = d.submit("--array 0-1 sleep.sh");
  d.wait_state(run, "RUNNING");
  const auto rows = [&](const std::string& args) {
    Result r = d.gpuq("queue --noheader " + args);
    EXPECT_EQ(r.rc, 0) << args << ": " << r.err;
    return lines(r.out);
  };
  auto pd = rows("-t pd");
  ASSERT_EQ(pd.size(), 1u);
  EXPECT_NE(pd[0].find("waiting"), std::string::npos) << pd[0];
  EXPECT_EQ(rows("-t PENDING,running").size(), 4u);
  EXPECT_EQ(rows("-t all").size(), 4u);
  // squeue's -u: a list, of names or uids.
  EXPECT_EQ(rows(fmt::format("-u nobody,{}", getuid())).size(), 4u);
  EXPECT_EQ(rows("-u nobody").size(), 0u);
  const auto tasks = rows(fmt::format("-j {}", arr));  // the array's id: its two tasks
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_NE(tasks[0].find(fmt::format("{}_0", arr)), std::string::npos) << tasks[0];
  EXPECT_EQ(rows(fmt::format("-j {},{}_1", run, arr)).size(), 2u);
  EXPECT_EQ(rows(fmt::format("-t R -j {}", wait)).size(), 0u);
  EXPECT_EQ(rows(fmt::format("-j {},999,{}", run, run)).size(), 1u);  // several: 999 skipped
  EXPECT_EQ(nlohmann::json::parse(d.gpuq("queue --json -t PD").out).size(), 1u);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"queue -t CD", "gpuq queue -t CD: the queue holds pending and running jobs; finished "
                      "ones are in gpuq history"},
      {"queue -t done", "gpuq queue -t 'done': expected PENDING (PD), RUNNING (R), COMPLETING"},
      {"queue -t PD,,R", "gpuq queue -t 'PD,,R': expected"},
      {"queue -j $(printf '1\\033x')", "gpuq queue -j '1?x': expected job ids"},
      {"queue -j 999", "invalid job id '999'"},
      {"queue -j 1,,x", "gpuq queue -j '1,,x': expected job ids, N or N_T, separated by commas"},
      {"history -j x", "gpuq history -j 'x': expected job ids"}};
  d.expect_refused(bad);
  EXPECT_NE(d.request(R"({"op":"queue","states":["DONE"]})").value("error", "").find("states"),
            std::string::npos);

  Result both = d.gpuq(fmt::format("show {} {}", run, wait));
  ASSERT_EQ(both.rc, 0) << both.err;
  EXPECT_NE(both.out.find(fmt::format("JobId={} ", run)), std::string::npos) << both.out;
  EXPECT_NE(both.out.find(fmt::format("JobId={} ", wait)), std::string::npos) << both.out;
  Result twice = d.gpuq(fmt::format("show {} {} 999", run, run));  // each once, 999 skipped
  ASSERT_EQ(twice.rc, 0) << twice.err;
  EXPECT_EQ(twice.out.find("JobId="), twice.out.rfind("JobId=")) << twice.out;
  // Requeue=1 as scontrol shows a requeueable job: gpuq requeue may put a batch job back,
  // unless it was submitted with --no-requeue.
  Result batch = d.gpuq(fmt::format("show {}", run));
  EXPECT_NE(batch.out.find("Requeue=1 "), std::string::npos) << batch.out;
  const int64_t fixed = d.submit("-H --no-requeue sleep.sh");
  Result no = d.gpuq(fmt::format("show {}", fixed));
  EXPECT_NE(no.out.find("Requeue=0 "), std::string::npos) << no.out;

  ASSERT_EQ(d.gpuq(fmt::format("cancel {}", run)).rc, 0);
  d.wait_final(run);
  Result h = d.gpuq(fmt::format("history --noheader -j {},{},{}", run, wait, run));
  ASSERT_EQ(h.rc, 0) << h.err;
  auto done = lines(h.out);
  ASSERT_EQ(done.size(), 1u) << h.out;
  EXPECT_EQ(done[0].rfind(std::to_string(run) + " ", 0), 0u) << done[0];
  EXPECT_NE(done[0].find("CANCELLED"), std::string::npos) << done[0];
  EXPECT_NE(h.err.find(fmt::format("job {} has not finished: gpuq queue -j {} shows it", wait,
                                   wait)),
            std::string::npos)
      << h.err;
  EXPECT_EQ(lines(d.gpuq(fmt::format("history --noheader -u nobody -j {}", run)).out).size(), 0u);
  EXPECT_EQ(lines(d.gpuq(fmt::format("history --noheader -u nobody,{}", getuid())).out).size(),
            1u);
  ASSERT_EQ(d.gpuq(fmt::format("cancel {} {}", wait, arr)).rc, 0);
  d.wait_final(arr + 1);
  const auto two = lines(d.gpuq(fmt::format("history --noheader -n 2 -j {},{}", run, arr)).out);
  ASSERT_EQ(two.size(), 2u);  // the newest two of three, oldest first
  EXPECT_EQ(two[0].rfind(fmt::format("{}_0 ", arr), 0), 0u) << two[0];
  EXPECT_EQ(two[1].rfind(fmt::format("{}_1 ", arr), 0), 0u) << two[1];
  // Many unfinished jobs get one note, not one each (a line per task of a large array).
  const int64_t held = d.submit("-H --array 0-4 sleep.sh");
  Result many = d.gpuq(fmt::format("history -j {}", held));
  ASSERT_EQ(many.rc, 0) << many.err;
  EXPECT_EQ(lines(many.err).size(), 1u) << many.err;
  EXPECT_NE(many.err.find(fmt::format("5 of the jobs have not finished ({}_0, {}_1, {}_2, ...)",
                                      held, held, held)),
            std::string::npos)
      << many.err;
}

// A cancelled job whose program ignores SIGTERM runs on until KillWait ends it: squeue shows such
// a job as CG (completing), not R.
TEST(GpuqE2E, ACancelledJobIsCompletingUntilItEnds) {
  Daemon d({"--kill-wait", "3"});
  d.script("stubborn.sh", "#!/bin/sh\ntrap '' TERM\nsleep 30 & wait\nsleep 30\n");
  const int64_t id = d.submit("stubborn.sh");
  d.wait_state(id, "RUNNING");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the trap is set
  ASSERT_EQ(d.gpuq(fmt::format("cancel {}", id)).rc, 0);
  auto row = lines(d.gpuq("queue --noheader").out);
  ASSERT_EQ(row.size(), 1u);
  EXPECT_NE(row[0].find(" CG "), std::string::npos) << row[0];
  // squeue -t filters on it, scontrol show says COMPLETING.
  EXPECT_EQ(lines(d.gpuq("queue --noheader -t cg").out).size(), 1u);
  EXPECT_EQ(lines(d.gpuq("queue --noheader -t R").out).size(), 0u);
  const std::string shown = d.gpuq(fmt::format("show {}", id)).out;
  EXPECT_NE(shown.find("JobState=COMPLETING"), std::string::npos) << shown;
  EXPECT_EQ(d.wait_final(id)["state"], "CANCELLED");
}

// So is a job past its time limit during KillWait: squeue shows a timed-out job as CG until its
// last process has gone.
TEST(GpuqE2E, AJobPastItsTimeLimitIsCompletingUntilItEnds) {
  Daemon d({"--kill-wait", "6"});
  d.script("stubborn.sh", "#!/bin/sh\n#SBATCH -t 0:01\ntrap '' TERM\nsleep 30 & wait\nsleep 30\n");
  const int64_t id = d.submit("stubborn.sh");
  const int64_t start_ms = d.wait_state(id, "RUNNING")["start_ms"].get<int64_t>();
  // Past the limit (1 s after the start) and well inside KillWait (7 s after it), however late
  // the wait saw the start.
  std::this_thread::sleep_until(
      std::chrono::system_clock::time_point(std::chrono::milliseconds(start_ms + 1800)));
  auto row = lines(d.gpuq("queue --noheader").out);
  ASSERT_EQ(row.size(), 1u);
  EXPECT_NE(row[0].find(" CG "), std::string::npos) << row[0];
  EXPECT_EQ(lines(d.gpuq("queue --noheader -t CG").out).size(), 1u);
  const std::string shown = d.gpuq(fmt::format("show {}", id)).out;
  EXPECT_NE(shown.find("JobState=COMPLETING"), std::string::npos) << shown;
  EXPECT_EQ(d.wait_final(id)["state"], "TIMEOUT");
}

// Cancel, hold, release and requeue name an array's task as the user does (12_1, not its own
// job id), and an array id that reached none of its tasks is an error, not a silent success.
TEST(GpuqE2E, ArrayRequestsThatDoNothingSaySo) {
  Daemon d;
  d.script("ok.sh", "#!/bin/sh\ntrue\n");
  const int64_t arr = d.submit("--array=0-1 ok.sh");
  d.wait_final(arr + 1);
  d.wait_final(arr);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fmt::format("cancel {}_1", arr),
       fmt::format("cannot cancel job {}_1: job {}_1 has already finished", arr, arr)},
      {fmt::format("cancel {}", arr),
       fmt::format("cannot cancel job {}: every task of the array has finished", arr)},
      {fmt::format("hold {}", arr),
       fmt::format("cannot hold job {}: no task of the array is pending", arr)},
      {fmt::format("release {}_0", arr), fmt::format("job {}_0 is not pending", arr)},
      {fmt::format("requeue {}", arr),
       fmt::format("cannot requeue job {}: no task of the array is running", arr)},
      {fmt::format("cancel --signal USR1 {}", arr),
       fmt::format("cannot signal job {}: no task of the array is running", arr)},
      // Each task has a file of its own: `log` of the array's id printed task 0's without a word
      // (a user's review); it asks which.
      {fmt::format("log {}", arr),
       fmt::format("job {} is an array of 2 tasks: ask for one task (ID_TASK)", arr)}};
  d.expect_refused(cases);
  EXPECT_EQ(d.gpuq(fmt::format("log {}_1", arr)).rc, 0);
}

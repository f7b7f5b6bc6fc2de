// End-to-end security with two real Unix users (created and deleted by the test; needs root):
// jobs run as their submitter, and another user cannot cancel, hold, signal, read the log of,
// or see the environment of someone else's job. Root can.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "gpurun/queue/protocol.h"
#include "harness.h"

using namespace gpuq_test;

TEST(GpuqUsers, SecondUserCannotTouchFirstUsersJob) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create users and run a root daemon";
  Daemon d;
  TestUser alice("gqa"), bob("gqb");
  std::string work = d.dir() + "/alice";
  sh(fmt::format("mkdir -p {0} && chown {1} {0} && chmod 700 {0}", work, alice.name()));
  std::string cli = d.cli();
  Result s = alice.run(fmt::format(
      "cd {} && printf \"#!/bin/sh\\nid -un\\necho SECRET=\\$SECRET\\nsleep 60\\n\" > job.sh && "
      "SECRET=s3cr3t {} submit --gpus 1 job.sh",
      work, cli));
  ASSERT_EQ(s.rc, 0) << s.err;
  int64_t id = std::stoll(s.out.substr(std::string("Submitted batch job ").size()));
  auto j = d.wait_state(id, "RUNNING");
  EXPECT_EQ(j["user"], alice.name());
  EXPECT_EQ(j["uid"], alice.uid());

  Result c = bob.run(fmt::format("{} cancel {}", cli, id));
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.err.find("permission denied"), std::string::npos) << c.err;
  Result sig = bob.run(fmt::format("{} cancel --signal KILL {}", cli, id));
  EXPECT_NE(sig.rc, 0);
  EXPECT_NE(sig.err.find("cannot signal"), std::string::npos) << sig.err;
  // Whose job it is comes before its state: "job N is not pending" told bob about her job.
  Result h = bob.run(fmt::format("{} hold {}", cli, id));
  EXPECT_NE(h.rc, 0);
  EXPECT_NE(h.err.find(fmt::format("permission denied: job {} belongs to {}", id, alice.name())),
            std::string::npos)
      << h.err;
  Result l = bob.run(fmt::format("{} log {}", cli, id));
  EXPECT_NE(l.rc, 0);
  EXPECT_NE(l.err.find("permission denied"), std::string::npos) << l.err;
  Result sj = bob.run(fmt::format("{} show --json {}", cli, id));
  ASSERT_EQ(sj.rc, 0) << sj.err;
  auto shown = nlohmann::json::parse(sj.out).at(0);
  EXPECT_FALSE(shown.contains("env"));
  EXPECT_FALSE(shown.contains("script"));
  EXPECT_EQ(sj.out.find("s3cr3t"), std::string::npos);
  EXPECT_NE(bob.run(fmt::format("{} drain", cli)).rc, 0);
  EXPECT_EQ(d.show(id)["state"], "RUNNING");  // untouched

  // Alice sees her own job, its environment and output; it ran as her, in her directory.
  // RUNNING comes before the job's first output: on a loaded machine wait for it (bounded).
  const std::string want = fmt::format("{}\nSECRET=s3cr3t\n", alice.name());
  Result al;
  for (int i = 0; i < 300; ++i) {
    al = alice.run(fmt::format("{} log {}", cli, id));
    if (al.rc == 0 && al.out == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(al.rc, 0) << al.err;
  EXPECT_EQ(al.out, want);
  struct stat st {};
  ASSERT_EQ(stat(fmt::format("{}/slurm-{}.out", work, id).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, alice.uid());
  Result ac = alice.run(fmt::format("{} cancel {}", cli, id));
  EXPECT_EQ(ac.rc, 0) << ac.err;
  auto fin = d.wait_final(id);
  EXPECT_EQ(fin["state"], "CANCELLED");
  EXPECT_EQ(fin["reason"], fmt::format("CANCELLED by {}", alice.uid()));
}

// Only root (or the daemon's user) sets a priority, as only Slurm's operators do: a user who
// could would put their jobs ahead of everyone's.
TEST(GpuqUsers, OnlyRootSetsAPriority) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create users and run a root daemon";
  Daemon d;
  TestUser alice("gqp");
  std::string work = d.dir() + "/alice";
  sh(fmt::format("mkdir -p {0} && chown {1} {0} && chmod 700 {0}", work, alice.name()));
  const std::string make =
      fmt::format("cd {} && printf \"#!/bin/sh\\ntrue\\n\" > job.sh && ", work);
  Result r = alice.run(make + d.cli() + " submit --priority=1000000 job.sh");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("--priority=1000000: only root or the user the gpuq daemon runs as"),
            std::string::npos)
      << r.err;
  Result plain = alice.run(make + d.cli() + " submit job.sh");
  EXPECT_EQ(plain.rc, 0) << plain.err;
  d.script("root.sh", "#!/bin/sh\ntrue\n");
  int64_t id = d.submit("--priority=5 root.sh");
  EXPECT_EQ(d.wait_final(id)["state"], "COMPLETED");
}

// One user's clients that ask for a big reply (the 7 MB queue of a 10,000-task array, 0.25 s to
// build) and never read it cannot stall the daemon for another user, nor make it hold every
// reply: the daemon serves one request per user per turn, and stops reading a user's requests
// while 64 MB of that user's replies wait. It served them in arrival order (another user waited
// behind 200 x 0.25 s and was dropped), and held them all (1-2 GB). At most 64 connections of
// one user are kept.
TEST(GpuqUsers, OneUsersStuckClientsCannotStallAnother) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create users and run a root daemon";
  Daemon d;
  TestUser alice("gqs");
  d.script("held.sh", "#!/bin/sh\ntrue\n");
  int64_t a = d.submit("--hold --array=0-9999 held.sh");
  std::vector<gpurun::queue::Fd> stuck;
  for (int i = 0; i < 200; ++i) {
    try {  // past 64 connections of one user the daemon closes them at once
      stuck.push_back(gpurun::queue::connect_unix(d.socket()));
      gpurun::queue::write_all(stuck.back().get(), gpurun::queue::frame(R"({"op":"queue"})"));
    } catch (const std::exception&) {
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  Result q = alice.run(d.cli() + " queue --noheader --me");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(q.rc, 0) << q.err;
  EXPECT_LT(secs, 5.0) << "alice waited behind root's stuck clients";
  EXPECT_LT(rss_mib(d.pid()), 600) << "the daemon holds every stuck client's reply";
  Result own = d.gpuq("queue --noheader");  // root's 65th connection: refused, saying why
  EXPECT_NE(own.rc, 0);
  EXPECT_NE(own.err.find("too many connections of user 0 at once (at most 64)"), std::string::npos)
      << own.err;
  stuck.clear();
  // After a restart the array's task ids are read once, at the first ID_TASK lookup.
  d.kill9();
  d.start();
  for (int t : {9999, 1, 5000}) {
    Result s = d.gpuq(fmt::format("show --json {}_{}", a, t));
    ASSERT_EQ(s.rc, 0) << s.err;
    EXPECT_NE(s.out.find(fmt::format("\"array_task_id\": {}", t)), std::string::npos) << t;
  }
  EXPECT_EQ(d.gpuq(fmt::format("cancel {}", a)).rc, 0);
}

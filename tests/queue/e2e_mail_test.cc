// End-to-end: --mail-type and --mail-user (issue 30, item 5) against a real daemon whose
// --sendmail is a stand-in that writes each message it is handed, and its arguments, to a file
// (no MTA runs in the test; any Debian MTA's sendmail takes `-t -oi` and the message alike).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace gpuq_test;

namespace {

// A sendmail that keeps every message as mail.N in `dir`: "ARGS: ..." and then what it read.
struct FakeSendmail {
  TempDir dir;
  std::string path() const { return dir.path() + "/sendmail"; }
  FakeSendmail() {
    sh(fmt::format("printf '#!/bin/sh\\nf={0}/mail.$(date +%%s%%N).$$\\n"
                   "{{ echo \"ARGS: $*\"; cat; }} > $f.tmp && mv $f.tmp $f\\n' > {1} && "
                   "chmod 755 {1}",
                   dir.path(), path()));
  }
  // The messages so far, oldest first.
  std::vector<std::string> mails() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      const std::string n = e.path().filename().string();
      if (n.rfind("mail.", 0) == 0 && n.find(".tmp") == std::string::npos) names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    std::vector<std::string> out;
    for (const auto& n : names) out.push_back(read_text(dir.path() + "/" + n));
    return out;
  }
  // Waits (bounded) until `n` messages are in, then a little more so that an extra one shows.
  std::vector<std::string> wait_for(size_t n) const {
    for (int i = 0; i < 200 && mails().size() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return mails();
  }
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// BEGIN and END reach the address given, through `sendmail -t -oi`; the end's mail carries the
// job's `gpuq stats` summary. gpuq ignored --mail-type (it warned, and sent nothing).
TEST(GpuqMail, BeginAndEndMailsReachTheAddressWithTheStats) {
  FakeSendmail mta;
  Daemon d({"--sendmail", mta.path()});
  d.script("job.sh", "#!/bin/sh\n#SBATCH --mail-type=BEGIN,END\n#SBATCH -J mailed\nsleep 1\n");
  const int64_t id = d.submit("--mail-user=alice@example.org --gres=gpu:1 job.sh");
  ASSERT_EQ(d.wait_final(id)["state"], "COMPLETED");
  const auto mails = mta.wait_for(2);
  ASSERT_EQ(mails.size(), 2u) << d.log();
  const std::string& begin = has(mails[0], "Began") ? mails[0] : mails[1];
  const std::string& end = has(mails[0], "Began") ? mails[1] : mails[0];
  for (const auto* m : {&begin, &end}) {
    EXPECT_TRUE(has(*m, "ARGS: -t -oi\n")) << *m;
    EXPECT_TRUE(has(*m, "\nTo: alice@example.org\n")) << *m;
  }
  EXPECT_TRUE(has(begin, fmt::format("Subject: gpuq Job_id={} Name=mailed Began, Queued time ", id)))
      << begin;
  EXPECT_TRUE(has(end, fmt::format("Subject: gpuq Job_id={} Name=mailed Ended, Run time 00:00:0",
                                   id)))
      << end;
  EXPECT_TRUE(has(end, ", COMPLETED, ExitCode 0\n")) << end;
  EXPECT_TRUE(has(end, fmt::format("\n\nJob ID: {}\nJob Name: mailed\n", id))) << end;
  EXPECT_TRUE(has(end, "GPUs: 1 (")) << end;
  EXPECT_TRUE(has(end, "CPU Utilized: ")) << end;
}

// FAIL alone: a mail for the job that failed (to the submitter's own mailbox when no
// --mail-user is given), none for the one that succeeded.
TEST(GpuqMail, FailMailsOnlyTheJobThatFailed) {
  FakeSendmail mta;
  Daemon d({"--sendmail", mta.path()});
  d.script("bad.sh", "#!/bin/sh\nexit 3\n");
  d.script("good.sh", "#!/bin/sh\ntrue\n");
  const int64_t bad = d.submit("--mail-type=FAIL -J bad bad.sh");
  const int64_t good = d.submit("--mail-type=FAIL -J good good.sh");
  ASSERT_EQ(d.wait_final(bad)["state"], "FAILED");
  ASSERT_EQ(d.wait_final(good)["state"], "COMPLETED");
  const auto mails = mta.wait_for(1);
  ASSERT_EQ(mails.size(), 1u) << d.log();
  const std::string user = sh("id -un").out.substr(0, sh("id -un").out.find('\n'));
  EXPECT_TRUE(has(mails[0], "\nTo: " + user + "\n")) << mails[0];
  EXPECT_TRUE(has(mails[0], fmt::format("Subject: gpuq Job_id={} Name=bad Failed, Run time ", bad)))
      << mails[0];
  EXPECT_TRUE(has(mails[0], ", FAILED, ExitCode 3\n")) << mails[0];
  // `gpuq show` says it as scontrol does: the submitter when no --mail-user was given.
  EXPECT_TRUE(has(d.gpuq(fmt::format("show {}", bad)).out,
                  fmt::format("   MailUser={} MailType=FAIL\n", user)));
  const int64_t quiet = d.submit("--mail-user=ops@example.org good.sh");
  EXPECT_TRUE(has(d.gpuq(fmt::format("show {}", quiet)).out,
                  "   MailUser=ops@example.org MailType=NONE\n"))
      << d.gpuq(fmt::format("show {}", quiet)).out;
}

// An array mails once, when its last task ends, with each state's count: not once per task.
TEST(GpuqMail, AnArrayMailsOnceWhenItsLastTaskEnds) {
  FakeSendmail mta;
  Daemon d({"--sendmail", mta.path()});
  d.script("task.sh", "#!/bin/sh\n[ \"$SLURM_ARRAY_TASK_ID\" != 2 ]\n");
  const int64_t id = d.submit("--array=0-3 --mail-type=END -J arr task.sh");
  for (int64_t t = id; t < id + 4; ++t) d.wait_final(t);
  const auto mails = mta.wait_for(1);
  ASSERT_EQ(mails.size(), 1u) << d.log();
  EXPECT_TRUE(
      has(mails[0], fmt::format("Subject: gpuq Job_id={}_* Name=arr Ended, 3 COMPLETED, 1 FAILED\n",
                                id)))
      << mails[0];
}

// TIME_LIMIT_50 and TIME_LIMIT_80: one mail each, when the run passes that share of its limit
// (a 5 s limit: at 2.5 s and 4 s), before the job times out; not again from a restarted daemon.
TEST(GpuqMail, TimeLimitMailsComeOnceAtTheirShareOfTheLimit) {
  FakeSendmail mta;
  Daemon d({"--sendmail", mta.path()});
  d.script("long.sh", "#!/bin/sh\nsleep 30\n");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t id = d.submit("-t 0:05 --mail-type=TIME_LIMIT_50,TIME_LIMIT_80 -J long long.sh");
  const auto mails50 = mta.wait_for(1);
  const double at50 =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - 0.5;
  ASSERT_GE(mails50.size(), 1u) << d.log();
  EXPECT_TRUE(has(mails50[0], fmt::format("Subject: gpuq Job_id={} Name=long Reached 50% of time "
                                          "limit, Run time 00:00:0",
                                          id)))
      << mails50[0];
  EXPECT_GE(at50, 2.0) << "the 50% mail came before half of the 5 s limit";
  d.kill9();  // the 50% mail is recorded: the next daemon sends only the 80% one
  d.start();
  EXPECT_EQ(d.wait_final(id)["state"], "TIMEOUT");
  const auto mails = mta.wait_for(2);
  ASSERT_EQ(mails.size(), 2u) << d.log();
  EXPECT_TRUE(has(mails[1], "Name=long Reached 80% of time limit, Run time 00:00:0")) << mails[1];
}

// A sendmail that is missing, or that fails, never affects the job; the daemon says why.
TEST(GpuqMail, ABrokenSendmailNeverAffectsTheJob) {
  Daemon d({"--sendmail", "/nonexistent/sendmail"});
  d.script("job.sh", "#!/bin/sh\ntrue\n");
  const int64_t id = d.submit("--mail-type=ALL job.sh");
  EXPECT_EQ(d.wait_final(id)["state"], "COMPLETED");
  EXPECT_TRUE(has(d.log(), fmt::format("job {}: mail to ", id))) << d.log();
  EXPECT_TRUE(has(d.log(), "not sent: /nonexistent/sendmail: No such file or directory")) << d.log();

  TempDir t;
  const std::string failing = t.path() + "/sendmail";
  sh(fmt::format("printf '#!/bin/sh\\ncat >/dev/null; exit 75\\n' > {0}; chmod 755 {0}", failing));
  Daemon d2({"--sendmail", failing});
  d2.script("job.sh", "#!/bin/sh\ntrue\n");
  EXPECT_EQ(d2.wait_final(d2.submit("--mail-type=ALL job.sh"))["state"], "COMPLETED");
  EXPECT_EQ(d2.gpuq("queue").rc, 0) << "the daemon must still answer";
}

// Bad values are refused by name before anything is queued; Slurm's types that gpuq does not
// send are accepted with a warning, so a cluster script runs unchanged.
TEST(GpuqMail, BadValuesAreRefusedAndUnsentTypesWarn) {
  Daemon d;
  d.script("job.sh", "#!/bin/sh\ntrue\n");
  Result bogus = d.gpuq(fmt::format("submit --mail-type=BEGIN,BOGUS {}/job.sh", d.dir()));
  EXPECT_NE(bogus.rc, 0);
  EXPECT_TRUE(has(bogus.err, "--mail-type 'BEGIN,BOGUS': unknown type 'BOGUS'")) << bogus.err;
  for (const char* user : {"'a b@example.org'", "'x@y.org,z@w.org'", "'-oQ/tmp'"}) {
    Result r = d.gpuq(fmt::format("submit --mail-user={} {}/job.sh", user, d.dir()));
    EXPECT_NE(r.rc, 0) << user;
    EXPECT_TRUE(has(r.err, "--mail-user")) << r.err;
  }
  d.script("tl.sh", "#!/bin/sh\n#SBATCH --mail-type=ARRAY_TASKS,END\ntrue\n");
  Result tl = sh(fmt::format("cd {} && {} submit tl.sh", d.dir(), d.cli()));
  EXPECT_EQ(tl.rc, 0) << tl.err;
  EXPECT_TRUE(has(tl.err, "--mail-type ARRAY_TASKS: gpuq sends no such mail")) << tl.err;
}

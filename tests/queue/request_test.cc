// Pins gpuq's request decoder (request.h): every field checked for type and range before the
// daemon acts, numbers compared as the JSON numbers they are (no wrap-around), and the bounds on
// one request (ids, values, nesting); also the terminal-safe text every listing prints and the
// array shape behind SLURM_ARRAY_TASK_MIN/MAX/COUNT/STEP; and a submission's job, parsed by the
// client, arriving typed and checked field by field.
#include "job/request.h"

#include <gtest/gtest.h>

#include <string>

#include "gpurun/common/terminal.h"
#include "gpurun/queue/job.h"
#include "gpurun/queue/sbatch.h"

using namespace gpurun::queue;

namespace {
std::string error_of(const std::string& text) {
  try {
    decode_request(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Request, DecodesEachOpsFields) {
  Request r = decode_request(R"({"op":"cancel","ids":["12","12_3",7],"signal":10})");
  EXPECT_EQ(r.op, Op::kCancel);
  ASSERT_EQ(r.ids.size(), 3u);
  EXPECT_EQ(r.ids[1].id, 12);
  EXPECT_EQ(r.ids[1].task, 3);
  EXPECT_EQ(r.ids[2].id, 7);
  EXPECT_EQ(r.signal, 10);
  r = decode_request(R"({"op":"requeue","ids":["12_3"]})");
  EXPECT_EQ(r.op, Op::kRequeue);
  ASSERT_EQ(r.ids.size(), 1u);
  EXPECT_EQ(r.ids[0].task, 3);
  r = decode_request(R"({"op":"submit","version":2,"script":"#!/bin/sh\n","cwd":"/w","umask":63,
                         "env":{"A":"1"},"job":{"name":"x"},"args":["a"]})");
  EXPECT_EQ(r.submit.umask, 077u);
  EXPECT_EQ(r.submit.env.at("A"), "1");
  EXPECT_EQ(r.submit.job.job_name, "x");
  r = decode_request(R"({"op":"history","limit":5,"all_users":true,"user":"bob"})");
  EXPECT_EQ(r.limit, 5u);
  EXPECT_EQ(r.users, std::vector<std::string>{"bob"});
  r = decode_request(R"({"op":"queue","users":["ann","bob"],"user":"cy"})");
  EXPECT_EQ(r.users, (std::vector<std::string>{"ann", "bob", "cy"}));
  EXPECT_THROW(decode_request(R"({"op":"queue","users":"ann"})"), std::invalid_argument);
  r = decode_request(R"({"op":"budget_set","subject":"@physics","hours":12.5,"period":"month"})");
  EXPECT_EQ(r.op, Op::kBudgetSet);
  EXPECT_EQ(r.subject, "@physics");
  EXPECT_EQ(r.hours, 12.5);
  EXPECT_EQ(r.period, "month");
  r = decode_request(R"({"op":"budget_set","subject":"bob","clear":true})");
  EXPECT_FALSE(r.hours);
  r = decode_request(R"({"op":"submit","version":2,"script":"x","cwd":"/w",
                         "job":{"shards":2,"gpu_type":"1g.10gb"}})");
  EXPECT_EQ(r.submit.job.shards, 2);
  EXPECT_EQ(r.submit.job.gpu_type, "1g.10gb");
}

TEST(Request, BudgetFieldsAreChecked) {
  for (const char* bad : {R"({"op":"budget_set","subject":"bob","hours":-1})",
                          R"({"op":"budget_set","subject":"bob","hours":1e12})",
                          R"({"op":"budget_set","subject":"bob","hours":"5"})",
                          R"({"op":"budget_set","subject":"bob"})",
                          R"({"op":"budget_set","subject":"","hours":1})",
                          R"({"op":"budget_set","subject":"@","hours":1})",
                          R"({"op":"budget_set","subject":"a b","hours":1})",
                          R"({"op":"budget_set","subject":"bob","hours":1,"period":"day"})",
                          R"({"op":"submit","version":2,"script":"x","cwd":"/w","job":{"gpu_type":"a:b"}})",
                          R"({"op":"submit","version":2,"script":"x","cwd":"/w","job":{"shards":5000}})"})
    EXPECT_THROW(decode_request(bad), std::invalid_argument) << bad;
}

// 4294967305 = 2^32 + 9: a cast to int first made it SIGKILL.
TEST(Request, NumbersAreRangeCheckedBeforeAnyCast) {
  for (const char* bad : {"4294967305", "18446744073709551615", "-1", "65", "9.5", "\"9\""})
    EXPECT_NE(error_of(std::string(R"({"op":"cancel","ids":["1"],"signal":)") + bad + "}")
                  .find("request field 'signal': expected an integer from 0 to 64, got " +
                        std::string(bad)),
              std::string::npos)
        << bad;
  EXPECT_NE(error_of(R"({"op":"status","recent":1000000})").find("'recent'"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"op":"submit","version":2,"script":"x","job":{},"umask":512})").find("'umask'"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"op":"report","since_ms":-5})").find("'since_ms'"), std::string::npos);
}

TEST(Request, OneRequestIsBounded) {
  std::string ids = R"({"op":"show","ids":[)";
  for (int i = 0; i < 10001; ++i) ids += i ? ",1" : "1";
  EXPECT_NE(error_of(ids + "]}")
                .find("the request names 10001 jobs: one request may name at most 10000 jobs"),
            std::string::npos);
  std::string values = R"({"op":"ping","x":[)";
  for (int i = 0; i < 100001; ++i) values += i ? ",0" : "0";
  EXPECT_NE(error_of(values + "]}").find("more than 100000 JSON values"), std::string::npos);
  EXPECT_NE(error_of(std::string(R"({"op":"ping","x":)") + std::string(40, '[') +
                     std::string(40, ']') + "}")
                .find("nested deeper than 32 levels"),
            std::string::npos);
}

TEST(Request, MalformedRequestsSayWhat) {
  EXPECT_NE(error_of("{not json").find("malformed request"), std::string::npos);
  // Found by gpuq_fuzz_request: nlohmann throws out_of_range, not parse_error, for this number.
  EXPECT_NE(error_of(R"({"op":7775555555e7777777555})").find("malformed request"),
            std::string::npos);
  EXPECT_NE(error_of("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"fly"})").find("unknown request op \"fly\""), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"show","ids":["1_x"]})").find("invalid job id '1_x'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"show"})").find("'ids'"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"submit","version":2})").find("'script'"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"op":"submit","version":2,"script":"x","job":{},"env":{"A":1}})").find("'env'"),
      std::string::npos);
}

// #SBATCH is parsed once, by the client: what the parser makes of a script and a command line
// travels typed and decodes to the same request, every field of it (issue 28 item 5).
TEST(Request, AParsedJobTravelsTypedAndWhole) {
  SubmitRequest s;
  s.script =
      "#!/bin/bash\n#SBATCH -J train --gres=gpu:2 -t 1-02:03:04 -o o-%j.txt -e e.txt -D sub\n"
      "#SBATCH -d afterok:4:5,afternotok:6 -a 0-6:3%2 --signal=B:USR1@90 --requeue -H\n"
      "#SBATCH --priority 7 -A physics -c 3 -n 2 --mem 4G\n"
      "#SBATCH --mail-type=END,FAIL --mail-user=ann@example.org\necho hi\n";
  s.script_name = "job.sh";
  s.cwd = "/w";
  s.args = {"a"};
  s.env = {{"PATH", "/bin"}};
  s.umask = 027;
  s.submit_key = "k";
  s.job = parse_sbatch_script(s.script);
  s.job.merge_from(parse_sbatch_options({"--gpus=1", "-W"}, nullptr, UnknownOptions::kRefuse));
  const Request r = decode_request(encode_submit(s).dump());
  ASSERT_EQ(r.op, Op::kSubmit);
  const JobRequest& j = r.submit.job;
  EXPECT_EQ(j.job_name, "train");
  EXPECT_EQ(j.gpus, 1);  // the command line over #SBATCH
  EXPECT_EQ(j.time_limit_s, 86400 + 2 * 3600 + 3 * 60 + 4);
  EXPECT_EQ(j.output, "o-%j.txt");
  EXPECT_EQ(j.error, "e.txt");
  EXPECT_EQ(j.chdir, "sub");
  ASSERT_TRUE(j.dependencies);
  ASSERT_EQ(j.dependencies->size(), 3u);
  EXPECT_EQ((*j.dependencies)[1].job_id, 5);
  EXPECT_EQ((*j.dependencies)[2].kind, DepKind::kAfterNotOk);
  ASSERT_TRUE(j.array);
  EXPECT_EQ(j.array->indices, (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(j.array->max_running, 2);
  ASSERT_TRUE(j.signal);
  EXPECT_EQ(j.signal->signal, 10);
  EXPECT_EQ(j.signal->lead_seconds, 90);
  EXPECT_TRUE(j.signal->batch_only);
  EXPECT_EQ(j.requeue, true);
  EXPECT_EQ(j.hold, true);
  EXPECT_EQ(j.priority, 7);
  EXPECT_EQ(j.account, "physics");
  EXPECT_EQ(j.cpus_per_task, 3);
  EXPECT_EQ(j.ntasks, 2);
  EXPECT_EQ(j.mail_events, kMailEnd | kMailFail);
  EXPECT_EQ(j.mail_user, "ann@example.org");
  EXPECT_FALSE(j.wait);             // the client's own business: it waits, the daemon need not know
  EXPECT_TRUE(j.warnings.empty());  // --mem's warning is the client's to print
  EXPECT_EQ(r.submit.script, s.script);
  EXPECT_EQ(r.submit.args, s.args);
  EXPECT_EQ(r.submit.env, s.env);
  EXPECT_EQ(r.submit.umask, 027u);
  // Nothing set stays unset: the daemon's defaults apply.
  s.job = parse_sbatch_script("#!/bin/sh\ntrue\n");
  const JobRequest none = decode_request(encode_submit(s).dump()).submit.job;
  EXPECT_FALSE(none.job_name || none.gpus || none.time_limit_s || none.array || none.signal ||
               none.dependencies || none.hold || none.priority || none.mail_events ||
               none.mail_user);
}

// The daemon checks every typed field against job.h's bounds, naming it by its path.
TEST(Request, ATypedJobIsCheckedFieldByField) {
  auto job_error = [](const std::string& job) {
    return error_of(R"({"op":"submit","version":2,"script":"#!/bin/sh\n","job":)" + job + "}");
  };
  const std::pair<const char*, const char*> cases[] = {
      {R"({"gpus":-1})", "'job.gpus': expected an integer from 0 to 1024, got -1"},
      {R"({"time_limit_s":1e3})", "'job.time_limit_s': expected an integer"},
      {R"({"time_limit_s":-5})", "'job.time_limit_s': expected an integer from 0 to"},
      {R"({"array":{"tasks":[0,1000001]}})",
       "'job.array.tasks': expected an integer from 0 to "
       "1000000, got 1000001"},
      {R"({"array":[1]})", "'job.array': expected an object"},
      {R"({"array":{"tasks":[1],"cap":2}})", "'job.array.cap': expected no such field"},
      {R"({"dependencies":[{"type":"afterok"}]})",
       "'job.dependencies[0].job_id': expected a job id"},
      {R"({"dependencies":[{"type":"afterok","job_id":0}]})",
       "'job.dependencies[0].job_id': expected an integer from 1 to"},
      {R"({"dependencies":"afterok:1"})", "'job.dependencies': expected a list"},
      {R"({"signal":{"lead_seconds":5}})", "'job.signal.number': expected a signal number"},
      {R"({"signal":{"number":10,"lead_seconds":70000}})", "'job.signal.lead_seconds'"},
      {R"({"priority":1000001})", "'job.priority': expected an integer from 0 to 1000000"},
      {R"({"ntasks":0})", "'job.ntasks': expected an integer from 1 to 1000000"},
      {R"({"hold":"yes"})", "'job.hold': expected true or false"},
      {R"({"output":""})", "'job.output': expected a non-empty string"},
      {R"({"account":7})", "'job.account': expected a string"},
      {R"({"mail_type":["END","SOON"]})", "'job.mail_type': expected a list of BEGIN, END"},
      {R"({"mail_type":["END","END"]})", "'job.mail_type': expected a list of BEGIN, END"},
      {R"({"mail_type":"END"})", "'job.mail_type': expected a list of BEGIN, END"},
      {R"({"mail_user":"a@b\nBcc: c@d"})", "'job.mail_user': expected one address"},
      {R"({"options":["-J","x"]})", "'job.options': expected no such field"},
      {R"("-J x")", "request field 'job': expected an object"},
  };
  for (const auto& [job, want] : cases)
    EXPECT_NE(job_error(job).find(want), std::string::npos) << job << ": " << job_error(job);
  // Version 1 (the options as text, for the daemon to parse) is refused by its version.
  EXPECT_NE(error_of(R"({"op":"submit","script":"#!/bin/sh\n","options":["-J","x"]})")
                .find("submit request of version 1 (options as text)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"submit","version":3,"script":"x","job":{}})")
                .find("'version': expected an integer from 2 to 2, got 3"),
            std::string::npos);
}

TEST(Terminal, ControlCharactersAreEscaped) {
  using gpurun::common::escape_control;
  EXPECT_EQ(escape_control("plain name-1.0 caf\xc3\xa9"), "plain name-1.0 caf\xc3\xa9");
  EXPECT_EQ(escape_control(std::string("a\x1b[31mb\rc\nd\te\0f\\g\x7f\x01", 19)),
            "a\\e[31mb\\rc\\nd\\te\\0f\\g\\x7f\\x01");
  EXPECT_EQ(escape_control("x\xc2\x9b"
                           "31m"),
            "x\\xc2\\x9b31m");  // C1 CSI in UTF-8
}

TEST(Job, ArrayShapeAsSlurmDescribesIt) {
  auto a = array_shape({0, 4, 8, 12});
  EXPECT_EQ(a.min, 0);
  EXPECT_EQ(a.max, 12);
  EXPECT_EQ(a.count, 4);
  EXPECT_EQ(a.step, 4);
  EXPECT_EQ(array_shape({7, 1, 3}).step, 1);  // uneven: 1
  EXPECT_EQ(array_shape({5}).count, 1);
}

// gpuq run's attach socket and token (job.h's AttachSpec): a supervisor running as root connects
// to what this names, so only gpuq run's own names pass, and the token is exactly 32 hex digits.
TEST(Request, AnAttachIsCheckedWhole) {
  const std::string token(32, 'a');
  auto submit = [](const std::string& attach, const std::string& job = "{}") {
    return R"({"op":"submit","version":2,"script":"#!/bin/sh\n","job":)" + job +
           R"(,"attach":)" + attach + "}";
  };
  Request r = decode_request(
      submit(R"({"socket":"gpuq-run-0-1f","token":")" + token + R"(","pty":true})"));
  ASSERT_TRUE(r.submit.attach.has_value());
  EXPECT_EQ(r.submit.attach->socket, "gpuq-run-0-1f");
  EXPECT_EQ(r.submit.attach->token, token);
  EXPECT_TRUE(r.submit.attach->pty);
  // Encoded and decoded again, whole.
  Request again = decode_request(encode_submit(r.submit).dump());
  ASSERT_TRUE(again.submit.attach.has_value());
  EXPECT_EQ(again.submit.attach->socket, "gpuq-run-0-1f");
  EXPECT_EQ(again.submit.attach->token, token);
  EXPECT_FALSE(decode_request(submit("null")).submit.attach.has_value());
  const std::pair<std::string, const char*> cases[] = {
      {R"({"socket":"/run/gpuq.sock","token":")" + token + "\"}", "'attach.socket': expected gpuq-run-"},
      {R"({"socket":"gpuq-run-../x","token":")" + token + "\"}", "'attach.socket'"},
      {R"({"socket":"gpuq-run-","token":")" + token + "\"}", "'attach.socket'"},
      {R"({"socket":"gpuq-run-1","token":"abc"})", "'attach.token': expected 32 lowercase hex"},
      {R"({"socket":"gpuq-run-1","token":")" + std::string(32, 'G') + "\"}", "'attach.token'"},
      {R"({"socket":"gpuq-run-1","token":")" + token + R"(","fds":[0]})",
       "'attach.fds': expected no such field"},
      {R"("gpuq-run-1")", "'attach': expected an object"},
  };
  for (const auto& [attach, want] : cases)
    EXPECT_NE(error_of(submit(attach)).find(want), std::string::npos)
        << attach << ": " << error_of(submit(attach));
  EXPECT_NE(error_of(submit(R"({"socket":"gpuq-run-1","token":")" + token + "\"}",
                            R"({"array":{"tasks":[1,2]}})"))
                .find("no attach for an array"),
            std::string::npos);
}

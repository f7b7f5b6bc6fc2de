// Pins gpuq's #SBATCH parsing to Slurm's rules (sbatch.1): where directives stop, how values are
// read, the time/signal/dependency/array/gres formats, and output file patterns.
#include "gpurun/queue/sbatch.h"

#include <gtest/gtest.h>

#include <csignal>

using namespace gpurun::queue;

TEST(SbatchScript, DirectivesStopAtFirstCommand) {
  auto r = parse_sbatch_script(
      "#!/bin/bash\n"
      "#SBATCH --job-name=train\n"
      "\n"
      "# a comment\n"
      "#SBATCH --gres=gpu:2   # two GPUs\n"
      "# SBATCH --time=5\n"
      "#SBATCHX --time=6\n"
      "echo hi\n"
      "#SBATCH --output=late.out\n");
  EXPECT_EQ(r.job_name.value(), "train");
  EXPECT_EQ(r.gpus.value(), 2);
  EXPECT_FALSE(r.time_limit_s.has_value());  // "# SBATCH" and "#SBATCHX" are not directives
  EXPECT_FALSE(r.output.has_value());        // after the first command
}

TEST(SbatchScript, ValuesAreNotShellExpandedButQuotesGroup) {
  auto r = parse_sbatch_script("#!/bin/sh\n#SBATCH -J \"my job\" -o $HOME/%x-%j.out\n");
  EXPECT_EQ(r.job_name.value(), "my job");
  EXPECT_EQ(r.output.value(), "$HOME/%x-%j.out");
}

TEST(SbatchScript, UnsupportedDirectivesWarnAndAreIgnored) {
  auto r = parse_sbatch_script(
      "#!/bin/sh\n#SBATCH --mem=36000\n#SBATCH -p gpu --qos=normal -N 1\n#SBATCH --frobnicate=3\n");
  ASSERT_EQ(r.warnings.size(), 5u);  // --mem, -p, --qos, -N, --frobnicate
  EXPECT_NE(r.warnings[4].find("unknown option '--frobnicate=3'"), std::string::npos);
}

// A long option one or two keystrokes from an sbatch option is a typo: an error naming the
// line and the option meant (a review's `#SBATCH --gress=gpu:2` only warned, and the job ran
// without GPUs). Another site's plugin option, far from any, still warns, naming its line.
TEST(SbatchScript, ATypoOfAnOptionIsAnErrorNamingTheLineAndTheOption) {
  for (const auto& [line, meant] : std::vector<std::pair<std::string, std::string>>{
           {"--gress=gpu:2", "--gres"},
           {"--gpu=2", "--gpus"},
           {"--tim=10", "--time"},
           {"--job_name=x", "--job-name"},
           {"--cpus-per-tsk=4", "--cpus-per-task"}}) {
    try {
      parse_sbatch_script("#!/bin/sh\n#SBATCH -J x\n\n#SBATCH " + line + "\necho hi\n");
      ADD_FAILURE() << line << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "#SBATCH line 4: unknown option '" + line + "' (did you mean " + meant + "?)");
    }
  }
  auto r = parse_sbatch_script("#!/bin/sh\n#SBATCH --container-image=nvcr.io/x\n");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "#SBATCH line 2: unknown option '--container-image=nvcr.io/x' ignored");
  try {
    parse_sbatch_script("#!/bin/sh\n#SBATCH -J x\n#SBATCH --time=abc\n");
    ADD_FAILURE() << "--time=abc was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("#SBATCH line 3: ", 0), 0u) << e.what();
  }
}

// --gpus-per-task N asks for N GPUs per task (-n), as in Slurm; it was ignored with a warning
// and the job got none. The later of it and --gres/--gpus wins, the command line over the script.
TEST(SbatchScript, GpusPerTaskTimesTheTasks) {
  auto r = parse_sbatch_script("#!/bin/sh\n#SBATCH -n 3\n#SBATCH --gpus-per-task=2\n");
  r.resolve_gpus_per_task();
  EXPECT_EQ(r.gpus.value(), 6);
  r = parse_sbatch_script("#!/bin/sh\n#SBATCH --gpus-per-task=a100:1 --gres=gpu:4\n");
  r.resolve_gpus_per_task();
  EXPECT_EQ(r.gpus.value(), 4);
  r = parse_sbatch_script("#!/bin/sh\n#SBATCH --gres=gpu:4\n");
  r.merge_from(parse_sbatch_options({"--gpus-per-task=1", "-n", "2"}));
  r.resolve_gpus_per_task();
  EXPECT_EQ(r.gpus.value(), 2);
  r = parse_sbatch_script("#!/bin/sh\n#SBATCH --gpus-per-task=1 -n 2\n");
  r.merge_from(parse_sbatch_options({"--gpus=3"}));
  r.resolve_gpus_per_task();
  EXPECT_EQ(r.gpus.value(), 3);
  r = parse_sbatch_script("#!/bin/sh\n#SBATCH --gpus-per-task=600 -n 2\n");
  EXPECT_THROW(r.resolve_gpus_per_task(), std::invalid_argument);
}

TEST(SbatchScript, ShortAndLongFormsAndFlags) {
  auto r = parse_sbatch_script(
      "#!/bin/sh\n#SBATCH -Jx -t 1:30 -G 3 -e err.txt -D /tmp -H --requeue\n"
      "#SBATCH --dependency=afterok:4:5,afternotok:6 --array=1-3%2 --signal=B:USR1@30\n");
  EXPECT_EQ(r.job_name.value(), "x");
  EXPECT_EQ(r.time_limit_s.value(), 90);
  EXPECT_EQ(r.gpus.value(), 3);
  EXPECT_EQ(r.error.value(), "err.txt");
  EXPECT_EQ(r.chdir.value(), "/tmp");
  EXPECT_TRUE(r.hold.value());
  EXPECT_TRUE(r.requeue.value());
  ASSERT_EQ(r.dependencies->size(), 3u);
  EXPECT_EQ((*r.dependencies)[2].kind, DepKind::kAfterNotOk);
  EXPECT_EQ((*r.dependencies)[1].job_id, 5);
  EXPECT_EQ(r.array->indices, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(r.array->max_running, 2);
  EXPECT_EQ(r.signal->signal, SIGUSR1);
  EXPECT_EQ(r.signal->lead_seconds, 30);
  EXPECT_TRUE(r.signal->batch_only);
}

TEST(SbatchScript, BadValuesThrowNamingTheInput) {
  try {
    parse_sbatch_script("#!/bin/sh\n#SBATCH --time=abc\n");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("abc"), std::string::npos);
  }
  EXPECT_THROW(parse_sbatch_script("#!/bin/sh\n#SBATCH --gres=gpu:x:y:z\n"), std::invalid_argument);
  EXPECT_THROW(parse_sbatch_script("#!/bin/sh\n#SBATCH -J\n"), std::invalid_argument);
  EXPECT_THROW(parse_sbatch_script("#!/bin/sh\n#SBATCH \"unterminated\n"), std::invalid_argument);
  EXPECT_THROW(parse_sbatch_script("#!/bin/sh\n#SBATCH script.sh\n"), std::invalid_argument);
}

TEST(SbatchOptions, CommandLineOverridesScript) {
  auto r = parse_sbatch_script("#!/bin/sh\n#SBATCH -J a --gres=gpu:1 -t 10\n");
  size_t pos = 0;
  auto cli = parse_sbatch_options({"--gpus=2", "-J", "b", "job.sh", "--arg"}, &pos);
  EXPECT_EQ(pos, 3u);
  r.merge_from(cli);
  EXPECT_EQ(r.job_name.value(), "b");
  EXPECT_EQ(r.gpus.value(), 2);
  EXPECT_EQ(r.time_limit_s.value(), 600);
}

// On gpuq submit's command line an option gpuq does not know as sbatch's is an error (guessing
// its value took the script's name, then gpuq waited for a script on stdin); sbatch options gpuq
// ignores keep their arity (-Q takes none). In #SBATCH lines unknown options are warnings, and a
// following word that is no option is their value.
TEST(SbatchOptions, UnknownOptionsOnTheCommandLineAreErrors) {
  size_t pos = 0;
  try {
    parse_sbatch_options({"--frobnicate", "job.sh"}, &pos, UnknownOptions::kRefuse);
    FAIL() << "--frobnicate was accepted on the command line";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown option '--frobnicate'"), std::string::npos)
        << e.what();
  }
  auto r = parse_sbatch_options({"-Q", "job.sh", "x"}, &pos, UnknownOptions::kRefuse);
  EXPECT_EQ(pos, 1u) << "-Q (sbatch's --quiet) takes no value";
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "unsupported option '-Q' ignored");
  r = parse_sbatch_options({"--frobnicate", "3", "-w", "node1", "--mem", "4G"}, &pos);
  EXPECT_EQ(pos, 6u) << "directive words: each option's value consumed";
  EXPECT_EQ(r.warnings.size(), 3u);
  EXPECT_NO_THROW(parse_sbatch_script("#!/bin/sh\n#SBATCH -w node1 --exclude node3 --comment x\n"));
  // gpuq submit's own options take their values, whichever mode.
  parse_sbatch_options({"--socket", "/tmp/s", "--wrap", "echo hi", "--parsable"}, &pos,
                       UnknownOptions::kRefuse);
  EXPECT_EQ(pos, 5u);
}

TEST(TimeLimit, SlurmFormats) {
  EXPECT_EQ(parse_time_limit("5"), 300);
  EXPECT_EQ(parse_time_limit("5:30"), 330);
  EXPECT_EQ(parse_time_limit("1:02:03"), 3723);
  EXPECT_EQ(parse_time_limit("2-3"), 2 * 86400 + 3 * 3600);
  EXPECT_EQ(parse_time_limit("2-00:00"), 2 * 86400);
  EXPECT_EQ(parse_time_limit("1-1:1:1"), 86400 + 3661);
  EXPECT_EQ(parse_time_limit("0"), 0);
  EXPECT_EQ(parse_time_limit("UNLIMITED"), 0);
  EXPECT_THROW(parse_time_limit(""), std::invalid_argument);
  EXPECT_THROW(parse_time_limit("1:2:3:4"), std::invalid_argument);
  EXPECT_THROW(parse_time_limit("-5"), std::invalid_argument);
  EXPECT_THROW(parse_time_limit("1-"), std::invalid_argument);
}

TEST(Signals, NamesNumbersAndSpecs) {
  EXPECT_EQ(parse_signal_name("USR1"), SIGUSR1);
  EXPECT_EQ(parse_signal_name("SIGTERM"), SIGTERM);
  EXPECT_EQ(parse_signal_name("usr2"), SIGUSR2);
  EXPECT_EQ(parse_signal_name("9"), 9);
  EXPECT_THROW(parse_signal_name("NOPE"), std::invalid_argument);
  EXPECT_THROW(parse_signal_name("0"), std::invalid_argument);
  auto s = parse_signal_spec("USR2");
  EXPECT_EQ(s.lead_seconds, 60);  // Slurm's default lead
  EXPECT_FALSE(s.batch_only);
  EXPECT_THROW(parse_signal_spec("B:@5"), std::invalid_argument);
}

TEST(Dependencies, TypesAndErrors) {
  auto d = parse_dependency("afterany:3:4,12");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[2].kind, DepKind::kAfterAny);
  EXPECT_EQ(d[2].job_id, 12);
  EXPECT_THROW(parse_dependency("afterok:1?afterok:2"), std::invalid_argument);
  EXPECT_THROW(parse_dependency("singleton"), std::invalid_argument);
  EXPECT_THROW(parse_dependency("afterok"), std::invalid_argument);
  EXPECT_THROW(parse_dependency("afterok:x"), std::invalid_argument);
  // Slurm's ID_T: one task of an array.
  auto t = parse_dependency("afterok:7_3:8");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].job_id, 7);
  EXPECT_EQ(t[0].task, 3);
  EXPECT_EQ(t[1].task, -1);
  EXPECT_THROW(parse_dependency("afterok:7_"), std::invalid_argument);
  EXPECT_THROW(parse_dependency("afterok:7_x"), std::invalid_argument);
  EXPECT_THROW(parse_dependency("afterok:_3"), std::invalid_argument);
}

TEST(Arrays, RangesStepsListsAndCap) {
  EXPECT_EQ(parse_array("0-15:4").indices, (std::vector<int>{0, 4, 8, 12}));
  auto a = parse_array("0,6,16-18%3");
  EXPECT_EQ(a.indices, (std::vector<int>{0, 6, 16, 17, 18}));
  EXPECT_EQ(a.max_running, 3);
  EXPECT_THROW(parse_array("5-1"), std::invalid_argument);
  EXPECT_THROW(parse_array("0-100000"), std::invalid_argument);  // more than 10,000 tasks
  EXPECT_THROW(parse_array("1:0"), std::invalid_argument);
  EXPECT_THROW(parse_array("0-3%0"), std::invalid_argument);  // it meant no cap at all
}

// A count that is not one ("gpu:-1", "gpu:2x") is refused; it was taken for a type: 1 GPU.
TEST(Gres, MalformedCountsAreNotTypes) {
  EXPECT_THROW(parse_gres("gpu:-1"), std::invalid_argument);
  EXPECT_THROW(parse_gres("gpu:2x"), std::invalid_argument);
  EXPECT_EQ(parse_gres("gpu:v100-sxm2").gpus, 1);
  try {
    parse_sbatch_options({"--priority=-5"});
    FAIL() << "--priority=-5 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("expected an integer from 0 to 1000000"),
              std::string::npos)
        << e.what();
  }
}

// --gpus-per-socket was ignored with a warning and the job ran without GPUs: refused, naming
// what to ask with.
TEST(Gres, GpusPerSocketIsRefused) {
  try {
    parse_sbatch_script("#!/bin/sh\n#SBATCH --gpus-per-socket=1\n");
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gpuq does not place GPUs by socket; ask for them with "
                                         "--gpus N"),
              std::string::npos)
        << e.what();
  }
}

TEST(Gres, GpusPerTaskErrorsNameItAndRefuseZero) {
  for (const std::string bad : {"-1", "0", "a:b:2"}) {
    try {
      parse_sbatch_script("#!/bin/sh\n#SBATCH --gpus-per-task=" + bad + "\n");
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--gpus-per-task '" + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Gres, GpuCounts) {
  EXPECT_EQ(parse_gres("gpu").gpus, 1);
  EXPECT_EQ(parse_gres("gpu:2").gpus, 2);
  EXPECT_EQ(parse_gres("gpu:P4:1").gpus, 1);
  EXPECT_EQ(parse_gres("gpu:p4:3").gpus, 3);
  EXPECT_EQ(parse_gres("gpu:a100").gpus, 1);
  EXPECT_THROW(parse_gres("mps:100"), std::invalid_argument);
  // Shards (Slurm's gres/shard): K shards of one GPU; not with whole GPUs in the same job.
  EXPECT_EQ(parse_gres("shard:3").shards, 3);
  EXPECT_EQ(parse_gres("shard:3").gpus, 0);
  EXPECT_EQ(parse_gres("shard").shards, 1);
  EXPECT_THROW(parse_gres("gpu:1,shard:2"), std::invalid_argument);
  EXPECT_THROW(parse_gres("shard:-1"), std::invalid_argument);
  EXPECT_THROW(parse_gres("shard:5000"), std::invalid_argument);
  EXPECT_EQ(parse_gpus("a100:2"), 2);
}

TEST(OutputPattern, SlurmLetters) {
  PatternVars v{128, 0, -1, "train", "alice", "box"};
  EXPECT_EQ(expand_output_pattern("slurm-%j.out", v), "slurm-128.out");
  EXPECT_EQ(expand_output_pattern("job%4j.out", v), "job0128.out");
  EXPECT_EQ(expand_output_pattern("%x_%u_%N_%%.log", v), "train_alice_box_%.log");
  EXPECT_EQ(expand_output_pattern("a\\%j", v), "a%j");  // backslash: no substitution
  PatternVars arr{130, 128, 2, "t", "u", "h"};
  EXPECT_EQ(expand_output_pattern("slurm-%A_%a.out", arr), "slurm-128_2.out");
  EXPECT_EQ(expand_output_pattern("%q%", v), "%q%");
  // A width over 10 pads to 10, as Slurm's (%999j made 999 bytes of each id).
  EXPECT_EQ(expand_output_pattern("%12j", v), "0000000128");
  EXPECT_EQ(expand_output_pattern("%999999999999999999999j", v), "0000000128");
}

// --mail-type's words become MailEvent bits; Slurm's types gpuq does not send are named for a
// warning; anything else is refused by name. --mail-user takes one plain address.
TEST(SbatchMail, TypesAndAddresses) {
  std::vector<std::string> ignored;
  EXPECT_EQ(parse_mail_type("ALL", &ignored), kMailBegin | kMailEnd | kMailFail | kMailRequeue);
  EXPECT_EQ(parse_mail_type("NONE", &ignored), 0u);
  EXPECT_EQ(parse_mail_type("END,FAIL", &ignored), kMailEnd | kMailFail);
  EXPECT_TRUE(ignored.empty());
  EXPECT_EQ(parse_mail_type("TIME_LIMIT_80,BEGIN", &ignored), kMailTimeLimit80 | kMailBegin);
  EXPECT_TRUE(ignored.empty());
  EXPECT_EQ(parse_mail_type("ARRAY_TASKS,END", &ignored), unsigned{kMailEnd});
  EXPECT_EQ(ignored, std::vector<std::string>{"ARRAY_TASKS"});
  EXPECT_THROW(parse_mail_type("END,end", &ignored), std::invalid_argument);
  EXPECT_EQ(parse_mail_user("alice@example.org"), "alice@example.org");
  for (const char* bad : {"", "a b", "a,b", "a\nBcc: x", "<a@b>", "-oQ", "a@", "\"a\"@b"})
    EXPECT_THROW(parse_mail_user(bad), std::invalid_argument) << bad;
  auto r = parse_sbatch_script("#!/bin/sh\n#SBATCH --mail-type=BEGIN --mail-user=bob\n");
  EXPECT_EQ(r.mail_events.value(), unsigned{kMailBegin});
  EXPECT_EQ(r.mail_user.value(), "bob");
  EXPECT_TRUE(r.warnings.empty());
}

// --export, as sbatch reads it (it was ignored with a warning: `--export=ALL,LR=0.1` left LR
// unset, `--export=NONE` passed everything).
TEST(SbatchOptions, ExportChoosesTheJobsEnvironment) {
  const std::map<std::string, std::string> env = {
      {"HOME", "/home/a"}, {"USER", "a"}, {"PATH", "/opt/venv/bin:/usr/bin"}, {"TOKEN", "t"},
      {"LR", "0.5"}};
  auto with = [&](const std::string& spec) {
    auto e = env;
    parse_sbatch_script("#!/bin/sh\n#SBATCH --export=" + spec + "\n").apply_export(e);
    return e;
  };
  EXPECT_EQ(with("ALL"), env);
  auto all_plus = with("ALL,LR=0.1,NEW=x");
  EXPECT_EQ(all_plus.at("LR"), "0.1");
  EXPECT_EQ(all_plus.at("NEW"), "x");
  EXPECT_EQ(all_plus.at("TOKEN"), "t");
  EXPECT_EQ(with("NONE"), (std::map<std::string, std::string>{
                              {"HOME", "/home/a"}, {"USER", "a"}, {"PATH", "/usr/local/bin:/usr/bin:/bin"}}));
  auto named = with("LR,EPOCHS=3");
  EXPECT_EQ(named.count("TOKEN"), 0u);
  EXPECT_EQ(named.at("LR"), "0.5");
  EXPECT_EQ(named.at("EPOCHS"), "3");
  EXPECT_THROW(with("ALL,=3"), std::invalid_argument);
  // The keywords in any case, as Slurm takes them (`all` was a variable list: the job lost
  // the submitter's environment).
  EXPECT_EQ(with("all"), env);
  EXPECT_EQ(with("All,LR=0.1").at("TOKEN"), "t");
  EXPECT_EQ(with("none"), with("NONE"));
  // NIL: nothing of the submitter's, not even a login's basics (it was taken as a variable
  // named NIL: the job ran with a login's environment); it takes no names.
  EXPECT_TRUE(with("NIL").empty());
  EXPECT_TRUE(with("nil").empty());
  EXPECT_THROW(with("NIL,LR=0.1"), std::invalid_argument);
  EXPECT_THROW(with("ALL,NIL"), std::invalid_argument);
}

// gpu:WORD is one GPU of that type, as in Slurm; gpuq does not check types (but MIG profiles), so
// a word meant as a count gets a warning (a user's review: --gres=gpu:two gave 1 GPU silently).
TEST(Sbatch, AGresTypeWithoutACountWarns) {
  auto two = parse_sbatch_script("#!/bin/sh\n#SBATCH --gres=gpu:two\n");
  EXPECT_EQ(two.gpus, 1);
  ASSERT_EQ(two.warnings.size(), 1u);
  EXPECT_EQ(two.warnings[0],
            "#SBATCH line 2: --gres=gpu:two: 'two' is taken as a GPU type, which gpuq does not "
            "check: 1 GPU (gpu:N asks for N)");
  for (const char* fine : {"gpu:2", "gpu:a100:2", "gpu:1g.10gb:1", "gpu"})
    EXPECT_TRUE(parse_sbatch_script(std::string("#!/bin/sh\n#SBATCH --gres=") + fine + "\n")
                    .warnings.empty())
        << fine;
}

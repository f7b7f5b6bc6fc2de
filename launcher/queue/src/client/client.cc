// gpuq subcommands (client.h).
#include "client/client.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "client/env.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/strings.h"
#include "gpurun/common/terminal.h"
#include "gpurun/queue/format.h"
#include "gpurun/queue/job.h"
#include "gpurun/queue/protocol.h"
#include "gpurun/queue/sbatch.h"
#include "job/json_fields.h"
#include "job/request.h"
#include "supervise/attach.h"
#include "supervise/runfiles.h"

namespace gpurun::queue {
namespace po = boost::program_options;

namespace {

constexpr const char* kSystemSocket = "/run/gpuq.sock";

}  // namespace

// Sends one request; GPUQ_RETRY_SECONDS (default 0) retries while the daemon is unreachable or
// drops the connection (a daemon restart). Submissions carry a key, so a retry never duplicates.
nlohmann::json call(const std::string& socket, const nlohmann::json& req) {
  const double retry_s = queue_env().retry_seconds;
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(retry_s * 1000));
  const std::string bytes = frame(req.dump());
  if (bytes.size() > kMaxRequestBytes + 4)
    throw std::invalid_argument(
        fmt::format("the request is {:.1f} MiB, more than gpuq's limit of {} MiB (a script and its "
                    "environment must fit)",
                    bytes.size() / 1048576.0, kMaxRequestBytes >> 20));
  while (true) {
    try {
      Fd fd = connect_unix(socket);
      write_all(fd.get(), bytes);
      auto reply = nlohmann::json::parse(read_frame(fd.get(), kMaxReplyBytes));
      if (!reply.value("ok", false))
        throw std::invalid_argument(reply.value("error", std::string("request failed")));
      return reply;
    } catch (const std::invalid_argument&) {
      throw;  // the daemon answered: retrying would not change its mind
    } catch (const std::exception&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

bool parse(const Args& a, po::options_description& desc, po::positional_options_description* pos,
           const std::string& usage, Parsed* out) {
  desc.add_options()("help,h", "show this help")(
      "socket", po::value<std::string>(),
      "daemon socket (default: $GPUQ_SOCKET, /run/gpuq.sock, "
      "or the per-user socket)");
  auto parser = po::command_line_parser(a).options(desc);
  if (pos) parser.positional(*pos);
  po::store(parser.run(), out->vm);
  if (out->vm.count("help")) {
    std::cout << usage << "\n\n" << desc << "\n";
    return false;
  }
  po::notify(out->vm);
  out->socket =
      out->vm.count("socket") ? out->vm["socket"].as<std::string>() : default_socket_path();
  return true;
}

namespace {

std::string read_all(std::istream& in) {
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What sbatch refuses too, said before the job is queued (it failed later, as 'exec ...: No such
// file or directory'): DOS line breaks, and an interpreter in #! that is not an executable file
// here (the job runs on this machine, as this user).
void require_runnable(const std::string& script, const std::string& name) {
  if (script.find("\r\n") != std::string::npos)
    throw std::invalid_argument(fmt::format(
        "{} has DOS line breaks (\\r\\n), which the shell reads as part of each command: convert "
        "it, e.g. dos2unix",
        name));
  if (script.rfind("#!", 0) != 0) return;  // the daemon says what a batch script must start with
  std::istringstream first_line(script.substr(2, script.find('\n') - 2));
  std::string interp;
  first_line >> interp;
  if (!interp.empty() && ::access(interp.c_str(), X_OK) != 0)
    throw std::invalid_argument(
        fmt::format("{}: the interpreter '{}' of its #! line {}", name, interp,
                    errno == ENOENT ? "does not exist" : "is not executable by you"));
}

// The show reply of `id` (every task of an array), retried through a daemon restart of up to 60 s
// (the job keeps running meanwhile); brief: without environments and scripts.
nlohmann::json show_jobs(const std::string& socket, const std::string& id, bool brief) {
  for (int tries = 0;; ++tries) {
    try {
      return call(socket, {{"op", "show"}, {"ids", {id}}, {"brief", brief}})["jobs"];
    } catch (const std::invalid_argument&) {
      throw;  // the daemon answered with an error
    } catch (const std::exception&) {
      if (tries >= 240) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
}

bool final_state(const nlohmann::json& j) {
  const auto s = j["state"].get<std::string>();
  return s != "PENDING" && s != "RUNNING";
}

// sbatch --wait's exit status for one ended job: its exit code, or 1 when a signal ended it or it
// never ran to its end (NODE_FAIL, or cancelled before it started).
int wait_status(const nlohmann::json& j) {
  const std::string state = j["state"].get<std::string>();
  if (j.value("exit_signal", 0) != 0) return 1;
  if (state == "NODE_FAIL" || (state == "CANCELLED" && j.value("start_ms", int64_t{0}) == 0))
    return 1;
  return j.value("exit_code", 0);
}

// The batch script: --wrap's command as a /bin/sh script, the file a[pos] (its arguments after
// it), or standard input for none or "-".
void read_script(const Args& a, size_t pos, const std::optional<std::string>& wrap,
                 std::string* script, std::string* name, std::vector<std::string>* args) {
  *name = "sbatch";
  if (wrap) {  // sbatch's: the command as a /bin/sh script
    if (pos < a.size())
      throw std::invalid_argument(fmt::format(
          "--wrap takes the place of a script, got '{}' as well: give one or the other", a[pos]));
    *script = "#!/bin/sh\n" + *wrap + "\n";
    *name = "wrap";
  } else if (pos < a.size() && a[pos] != "-") {
    struct stat st {};
    if (::stat(a[pos].c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      throw std::invalid_argument(
          fmt::format("'{}' is a directory: expected a batch script (a file)", a[pos]));
    std::ifstream in(a[pos], std::ios::binary);
    if (!in)
      throw std::runtime_error(fmt::format("cannot read script '{}': {}", a[pos], strerror(errno)));
    *script = read_all(in);
    *name = a[pos];
    args->assign(a.begin() + pos + 1, a.end());
  } else {
    *script = read_all(std::cin);
    if (pos < a.size()) args->assign(a.begin() + pos + 1, a.end());
  }
}

int report_results(const nlohmann::json& reply, const char* what) {
  int rc = 0;
  for (const auto& r : reply["results"]) {
    if (!r["ok"].get<bool>()) {
      fmt::print(stderr, "gpuq: error: {} job {}: {}\n", what,
                 r.value("display_id", std::to_string(r["job_id"].get<int64_t>())),
                 r["error"].get<std::string>());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

int wait_for_job(const std::string& socket, int64_t id) {
  int delay_ms = 100;
  while (true) {
    const nlohmann::json jobs = show_jobs(socket, std::to_string(id), true);
    bool done = true;
    int rc = 0;
    for (const auto& j : jobs) {
      done = done && final_state(j);
      if (done) rc = std::max(rc, wait_status(j));
    }
    if (done) return rc;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 2000);
  }
}

std::string default_socket_path() {
  const QueueEnv& env = queue_env();
  if (env.socket) return *env.socket;
  if (access(kSystemSocket, F_OK) == 0) return kSystemSocket;
  if (env.runtime_dir) return *env.runtime_dir + "/gpuq.sock";
  return fmt::format("/tmp/gpuq-{}.sock", getuid());
}

constexpr const char* kSubmitUsage =
    "usage: gpuq submit [OPTIONS] SCRIPT [ARGS...]\n"
    "Submits a batch script. #SBATCH lines are read as sbatch reads them (up to the first\n"
    "command); options given here override them. Without SCRIPT (or with -) the script is read\n"
    "from standard input. Prints 'Submitted batch job N'.\n\n"
    "Options (sbatch's): -J/--job-name NAME, --gres=gpu[:type]:N|shard:K,\n"
    "  -G/--gpus [type:]N, --gpus-per-task [type:]N (times -n),\n"
    "  -t/--time TIME (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S), -o/--output PATTERN,\n"
    "  -e/--error PATTERN (%j %x %u %A %a %%), -D/--chdir DIR,\n"
    "  -d/--dependency afterok|afterany|afternotok:ID[_T][:ID][,...], -a/--array 0-15[:step][%N],\n"
    "  --signal [B:]SIG[@SECS], --requeue, -H/--hold, --priority N, -A/--account NAME,\n"
    "  -c/--cpus-per-task N, -n/--ntasks N (SLURM_NTASKS only),\n"
    "  --export ALL|NONE|NIL|[ALL,]NAME[=VALUE],... (the job's environment),\n"
    "  --open-mode append|truncate,\n"
    "  -W/--wait (return when the job ends, with its exit code, as sbatch --wait)\n"
    "  --mail-type NONE|BEGIN|END|FAIL|REQUEUE|ALL|TIME_LIMIT[_90|_80|_50][,...],\n"
    "  --mail-user ADDRESS (default: you; sent through the daemon's sendmail; an array\n"
    "    mails once, when its last task ends)\n"
    "  --wrap CMD (CMD as a /bin/sh script instead of SCRIPT)\n"
    "gpuq's: --parsable (print only the id), --socket PATH, -h/--help\n"
    "Other Slurm options (--mem, -p, --exclusive, ...) are accepted and ignored with a warning;\n"
    "an option gpuq does not know as sbatch's is an error here, and a warning in #SBATCH lines\n"
    "(another site's plugin option) unless it is a typo of one (--gress: an error).";

void require_utf8_text(const SubmitRequest& req, const std::string& shown) {
  auto refuse = [](const std::string& what, const std::string& text, size_t at,
                   const std::string& advice) {
    throw std::invalid_argument(fmt::format("{} is not UTF-8 (byte 0x{:02x}): {}", what,
                                            static_cast<unsigned char>(text[at]), advice));
  };
  const std::string kept = "gpuq keeps it as UTF-8 text";
  if (size_t at = json_fields::invalid_utf8_at(req.script_name); at != std::string::npos)
    refuse("the script's or program's name", req.script_name, at, kept + "; rename it");
  if (size_t at = json_fields::invalid_utf8_at(req.cwd); at != std::string::npos)
    refuse("the current directory's path", req.cwd, at,
           kept + "; submit from another directory, or give -D/--chdir");
  for (const DirectiveLine& line : directive_lines(req.script))
    if (size_t at = json_fields::invalid_utf8_at(line.tail); at != std::string::npos)
      refuse(fmt::format("{} line {}", common::escape_control(shown), line.number), line.tail, at,
             "its #SBATCH options become the job's name, paths and mail address, which gpuq "
             "keeps as UTF-8 text; convert the line, e.g. with iconv -f latin1 -t utf-8");
  for (const auto& [name, value] : req.env)
    if (size_t at = json_fields::invalid_utf8_at(name); at != std::string::npos)
      refuse("the name of an environment variable", name, at,
             kept + "; unset it before submitting");
  try {
    (void)encode_submit(req).dump();  // the options: -J, -o, -e, --mail-user, --export values
  } catch (const nlohmann::json::type_error&) {
    throw std::invalid_argument(
        "an option's value is not UTF-8: gpuq keeps the job's name, paths, mail address and "
        "exported variables' names as UTF-8 text");
  }
}

int cmd_submit(const Args& a) {
  const char* usage = kSubmitUsage;
  for (const auto& w : a) {  // --help among the options (before the script) wins
    if (w.empty() || w[0] != '-' || w == "-") break;
    if (w == "-h" || w == "--help") {
      std::cout << usage << "\n";
      return 0;
    }
  }
  size_t pos = 0;
  // Validates early and finds the script; an option sbatch would not know is an error here.
  parse_sbatch_options(a, &pos, UnknownOptions::kRefuse);
  std::vector<std::string> options;
  std::string socket = default_socket_path();
  std::optional<std::string> wrap;
  bool parsable = false;
  for (size_t i = 0; i < pos; ++i) {
    if (a[i] == "--parsable") {
      parsable = true;
    } else if (a[i] == "--socket" && i + 1 < pos) {
      socket = a[++i];
    } else if (a[i] == "--wrap" && i + 1 < pos) {
      wrap = a[++i];
    } else if (a[i].rfind("--socket=", 0) == 0) {
      socket = a[i].substr(9);
    } else if (a[i].rfind("--wrap=", 0) == 0) {
      wrap = a[i].substr(7);
    } else {
      options.push_back(a[i]);
    }
  }
  SubmitRequest req;
  read_script(a, pos, wrap, &req.script, &req.script_name, &req.args);
  char cwd[4096];
  if (!getcwd(cwd, sizeof(cwd))) throw std::runtime_error("cannot determine the current directory");
  req.cwd = cwd;
  req.env = queue_env().all;
  const std::string shown =
      req.script_name == "sbatch" ? "the script on standard input" : req.script_name;
  require_runnable(req.script, shown);
  // #SBATCH lines and this command line are parsed here, once: the daemon gets the typed result.
  if (req.script.empty() && req.script_name == "sbatch")
    throw std::invalid_argument(
        "no script given, and standard input was empty: gpuq submit SCRIPT, or --wrap CMD");
  try {
    require_batch_script(req.script);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(common::escape_control(shown) + ": " + e.what());
  }
  req.job = parse_sbatch_script(req.script);
  req.job.merge_from(parse_sbatch_options(options, nullptr, UnknownOptions::kRefuse));
  req.job.resolve_gpus_per_task();
  req.job.apply_export(req.env, my_user_name());
  require_utf8_text(req, shown);
  const mode_t mask = ::umask(0);  // the job and its output files get it, as under sbatch
  ::umask(mask);
  req.umask = mask;
  req.submit_key = random_hex(16);
  auto reply = call(socket, encode_submit(req));
  for (const auto& w : req.job.warnings)
    fmt::print(stderr, "gpuq: warning: {}\n", common::escape_control(w));
  const int64_t id = reply["job_id"].get<int64_t>();
  if (parsable)
    fmt::print("{}\n", id);
  else
    fmt::print("Submitted batch job {}\n", id);
  if (!req.job.wait.value_or(false)) return 0;
  std::fflush(stdout);
  return wait_for_job(socket, id);
}

std::string my_user_name() {
  const auto pw = common::passwd_entry(getuid());
  return pw ? pw->name : "";
}

// -u USER[,USER...] of queue and history, each a name or a uid: users this machine knows, as
// squeue and sacct insist ("Invalid user"; a misspelt name listed nothing and exited 0), by name.
nlohmann::json known_users(const std::string& cmd, const std::string& list) {
  nlohmann::json names = nlohmann::json::array();
  for (const std::string& user : common::split(list, ',')) {
    std::optional<common::PasswdEntry> pw = common::passwd_entry(user);
    if (!pw && !user.empty() && user.size() < 10 &&
        user.find_first_not_of("0123456789") == std::string::npos)
      pw = common::passwd_entry(static_cast<uint32_t>(std::stoul(user)));
    if (!pw)
      throw std::invalid_argument(fmt::format("gpuq {} -u '{}': no such user", cmd,
                                              common::escape_control(user.substr(0, 64))));
    names.push_back(pw->name);
  }
  return names;
}

// One user goes as "user", which every daemon reads; several as "users".
void set_users(nlohmann::json& req, const nlohmann::json& names) {
  if (names.size() == 1)
    req["user"] = names[0];
  else
    req["users"] = names;
}

// A daemon older than this client ignores -j, -t and -u lists and lists every job: refused.
void require_filtered(const std::string& cmd, const nlohmann::json& reply) {
  if (!reply.value("filtered", false))
    throw std::runtime_error(fmt::format(
        "gpuq {}: the gpuq daemon is older than this client and cannot apply -j, -t or a -u "
        "list; restart it (gpuq daemon) to use them",
        cmd));
}

// -j ID[,ID...] of queue and history (squeue -j, sacct -j): the ids, checked here so that a typo
// is named before anything is sent.
nlohmann::json job_list(const std::string& cmd, const std::string& list) {
  nlohmann::json ids = nlohmann::json::array();
  for (const std::string& id : common::split(list, ',')) {
    try {
      parse_job_ref(id);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(
          fmt::format("gpuq {} -j '{}': expected job ids, N or N_T, separated by commas", cmd,
                      id_for_message(list)));
    }
    ids.push_back(id);
  }
  return ids;
}

// -t STATE[,STATE...] of queue (squeue -t): PENDING (PD), RUNNING (R), COMPLETING (CG) or all,
// any case.
nlohmann::json queue_states(const std::string& list) {
  nlohmann::json states = nlohmann::json::array();
  for (std::string st : common::split(list, ',')) {
    std::transform(st.begin(), st.end(), st.begin(), [](unsigned char c) { return toupper(c); });
    if (st == "ALL") return nlohmann::json::array();
    if (st == "CG" || st == "COMPLETING") {
      states.push_back("COMPLETING");
      continue;
    }
    bool known = false;
    for (JobState s : {JobState::kPending, JobState::kRunning, JobState::kCompleted,
                       JobState::kFailed, JobState::kCancelled, JobState::kTimeout,
                       JobState::kNodeFail}) {
      if (st != state_name(s) && st != state_code(s)) continue;
      if (is_final(s))
        throw std::invalid_argument(fmt::format(
            "gpuq queue -t {}: the queue holds pending and running jobs; finished ones are in "
            "gpuq history",
            st));
      states.push_back(state_name(s));
      known = true;
    }
    if (!known)
      throw std::invalid_argument(fmt::format(
          "gpuq queue -t '{}': expected PENDING (PD), RUNNING (R), COMPLETING (CG) or all, "
          "separated by commas",
          common::escape_control(list.substr(0, 80))));
  }
  return states;
}

// squeue's and scancel's -u, --me and -t, into a queue request.
void add_queue_filters(const Parsed& p, const std::string& cmd, nlohmann::json& req) {
  if (p.vm.count("user")) set_users(req, known_users(cmd, p.vm["user"].as<std::string>()));
  if (p.vm.count("states")) req["states"] = queue_states(p.vm["states"].as<std::string>());
  if (p.vm.count("me")) {
    req["user"] = my_user_name();
    if (req["user"] == "")
      throw std::runtime_error(fmt::format("uid {} has no passwd entry", getuid()));
  }
}

int cmd_queue(const Args& a) {
  po::options_description desc("gpuq queue options");
  desc.add_options()("user,u", po::value<std::string>(),
                     "only these users' jobs: USER[,USER...], names or uids")(
      "me", "only my jobs")("jobs,j", po::value<std::string>(),
                            "only these jobs: ID[,ID...] (an array's id: its tasks)")(
      "states,t", po::value<std::string>(), "only jobs in these states: PD, R, CG (or all)")(
      "long,l", "add TIME_LIMIT and the GPU ids")(
      "start", "add pending jobs' expected START_TIME and their place in the order (POS)")(
      "noheader", "no header line")("json", "the daemon's JSON document");
  Parsed p;
  if (!parse(a, desc, nullptr,
             "usage: gpuq queue [-u USER | --me] [-j ID,...] [-t PD,R,CG] [-l | --start] "
             "[--noheader] [--json]\n"
             "Lists pending and running jobs with squeue's columns.",
             &p))
    return 0;
  nlohmann::json req = {{"op", "queue"}};
  add_queue_filters(p, "queue", req);
  const bool filters = req.contains("users") || p.vm.count("jobs") || p.vm.count("states");
  if (p.vm.count("jobs")) req["ids"] = job_list("queue", p.vm["jobs"].as<std::string>());
  if (p.vm.count("json")) {
    auto reply = call(p.socket, req);
    if (filters) require_filtered("queue", reply);
    std::cout << reply["jobs"].dump(2) << "\n";
    return 0;
  }
  req["text"] = true;
  req["long"] = p.vm.count("long") > 0;
  req["start"] = p.vm.count("start") > 0;
  req["header"] = p.vm.count("noheader") == 0;
  auto reply = call(p.socket, req);
  if (filters) require_filtered("queue", reply);
  const std::string& text = reply["text"].get_ref<const std::string&>();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

// The job ids of cancel, hold, release and requeue (positional; at least one unless `optional`)
// and the command's own options in `desc`; nullopt for --help.
std::optional<std::pair<Parsed, std::vector<std::string>>> parse_ids(
    const Args& a, po::options_description& desc, const std::string& usage,
    bool optional = false) {
  desc.add_options()("ids", po::value<std::vector<std::string>>()->multitoken(),
                     "job ids (N or N_T)");
  po::positional_options_description pos;
  pos.add("ids", -1);
  Parsed p;
  if (!parse(a, desc, &pos, usage, &p)) return std::nullopt;
  if (!p.vm.count("ids") && !optional) throw std::invalid_argument("no job id given");
  auto ids = p.vm.count("ids") ? p.vm["ids"].as<std::vector<std::string>>()
                               : std::vector<std::string>{};
  return std::make_pair(std::move(p), std::move(ids));
}

// scancel's -u, --me and -t: the ids of the pending and running jobs they select (among `ids`
// when there are some), from the daemon's queue.
std::vector<std::string> selected_jobs(const Parsed& p, const std::vector<std::string>& ids) {
  nlohmann::json req = {{"op", "queue"}};
  add_queue_filters(p, "cancel", req);
  if (!ids.empty()) req["ids"] = ids;
  const auto reply = call(p.socket, req);
  require_filtered("cancel", reply);
  std::vector<std::string> out;
  // N_T for an array's task: its plain id would be the whole array's for the first task.
  for (const auto& j : reply["jobs"]) out.push_back(j["display_id"].get<std::string>());
  return out;
}

int cmd_cancel(const Args& a) {
  po::options_description desc("gpuq cancel options");
  desc.add_options()("signal,s", po::value<std::string>(),
                     "send this signal to the job's processes instead of cancelling it")(
      "user,u", po::value<std::string>(), "the jobs of these users: USER[,USER...]")(
      "me", "my jobs")("states,t", po::value<std::string>(),
                       "only jobs in these states: PD, R, CG (or all)");
  auto parsed = parse_ids(a, desc,
                          "usage: gpuq cancel [--signal SIG] [-u USER | --me] [-t PD,R] [ID...]\n"
                          "Cancels jobs (SIGTERM to the job's process group, SIGKILL after "
                          "KillWait), or with\n--signal only signals them. An array id cancels "
                          "every task. -u, --me and -t select\njobs as scancel's do (among the "
                          "ids, when given).",
                          true);
  if (!parsed) return 0;
  auto& [p, ids] = *parsed;
  const bool filters = p.vm.count("user") || p.vm.count("me") || p.vm.count("states");
  if (ids.empty() && !filters) throw std::invalid_argument("no job id given (or -u, --me, -t)");
  if (filters) ids = selected_jobs(p, ids);
  if (ids.empty()) return 0;  // as scancel: nothing selected, nothing to do
  nlohmann::json req = {{"op", "cancel"}, {"ids", ids}};
  const bool signal = p.vm.count("signal") > 0;
  if (signal) req["signal"] = parse_signal_name(p.vm["signal"].as<std::string>());
  return report_results(call(p.socket, req), signal ? "cannot signal" : "cannot cancel");
}

int cmd_hold(const Args& a, bool hold) {
  po::options_description desc(hold ? "gpuq hold options" : "gpuq release options");
  auto parsed = parse_ids(a, desc,
                          hold ? "usage: gpuq hold ID...\nKeeps pending jobs from starting until "
                                 "released."
                               : "usage: gpuq release ID...\nLets held jobs start again.");
  if (!parsed) return 0;
  const auto& [p, ids] = *parsed;
  nlohmann::json req = {{"op", hold ? "hold" : "release"}, {"ids", ids}};
  return report_results(call(p.socket, req), hold ? "cannot hold" : "cannot release");
}

int cmd_requeue(const Args& a) {
  po::options_description desc("gpuq requeue options");
  auto parsed = parse_ids(
      a, desc,
      "usage: gpuq requeue ID...\n"
      "Stops running jobs as cancel does (SIGTERM, SIGKILL after KillWait) and puts them\n"
      "back in the queue, like scontrol requeue: same id, SLURM_RESTART_COUNT + 1. An\n"
      "array id requeues its running tasks, N_T one task. Pending and finished jobs, jobs\n"
      "submitted with --no-requeue and gpuq run/alloc jobs are refused.");
  if (!parsed) return 0;
  const auto& [p, ids] = *parsed;
  // A job that requeues itself (gpurun --requeue runs `gpuq requeue $SLURM_JOB_ID`) is in the
  // process group the requeue stops: SIGTERM may come before the reply is read. Held until this
  // process exits, it cannot turn a requeue that worked into a failure its caller reports.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, nullptr);
  nlohmann::json req = {{"op", "requeue"}, {"ids", ids}};
  return report_results(call(p.socket, req), "cannot requeue");
}

int cmd_drain(const Args& a, bool drain) {
  po::options_description desc(drain ? "gpuq drain options" : "gpuq resume options");
  Parsed p;
  if (!parse(a, desc, nullptr,
             drain ? "usage: gpuq drain\nRunning jobs finish; no new job starts (root only)."
                   : "usage: gpuq resume\nStarts jobs again after a drain (root only).",
             &p))
    return 0;
  call(p.socket, {{"op", drain ? "drain" : "resume"}});
  fmt::print("{}\n", drain ? "draining: running jobs finish, no new job starts"
                           : "resumed: jobs start again");
  return 0;
}

namespace {
nlohmann::json show_one(const std::string& socket, const std::string& id) {
  auto reply = call(socket, {{"op", "show"}, {"ids", {id}}, {"brief", true}});
  if (reply["jobs"].empty()) throw std::invalid_argument(fmt::format("invalid job id '{}'", id));
  // An array's id names all its tasks, and each has a file of its own: which one is meant, the
  // user says.
  if (reply["jobs"].size() > 1)
    throw std::invalid_argument(fmt::format(
        "job {} is an array of {} tasks: ask for one task (ID_TASK)", id, reply["jobs"].size()));
  return reply["jobs"][0];
}
}  // namespace

int cmd_show(const Args& a) {
  po::options_description desc("gpuq show options");
  desc.add_options()("json", "the jobs' JSON documents");
  auto parsed = parse_ids(a, desc,
                          "usage: gpuq show [--json] ID...\nShows jobs (scontrol show job "
                          "style). The environment and script are shown to the job's\nowner "
                          "only, and only when one job is asked for.");
  if (!parsed) return 0;
  const auto& [p, ids] = *parsed;
  auto reply = call(p.socket, {{"op", "show"}, {"ids", ids}});
  if (p.vm.count("json")) {
    std::cout << reply["jobs"].dump(2) << "\n";
    return 0;
  }
  for (const auto& j : reply["jobs"]) std::cout << format_show(j, now_ms());
  return 0;
}

// Where `gpuq log -f` goes on reading after a pause: a requeued job's rerun starts its output
// file again (truncated, or a new file), as a shrunken file shows too; `tail -f` then starts
// from the top, and so does this. `rerun_start_ms`: when a rerun that truncates the file (the
// default --open-mode) started, 0 for none; the file is read from its start once the rerun has
// touched it (its mtime), even if it has grown past where the last read ended; then 0.
void reopen_if_restarted(Fd& fd, const std::string& path, int64_t& rerun_start_ms) {
  struct stat st, now;
  const bool open = fd && ::fstat(fd.get(), &st) == 0;
  const bool on_disk = ::stat(path.c_str(), &now) == 0;
  const bool replaced = open && on_disk && (st.st_ino != now.st_ino || st.st_dev != now.st_dev);
  const int64_t mtime_ms =
      on_disk ? int64_t(now.st_mtim.tv_sec) * 1000 + now.st_mtim.tv_nsec / 1000000 : 0;
  if (replaced || (rerun_start_ms && on_disk && mtime_ms >= rerun_start_ms)) {
    fd = Fd();  // opened again from the start by the caller
    rerun_start_ms = 0;
    return;
  }
  if (open && st.st_size < ::lseek(fd.get(), 0, SEEK_CUR))
    ::lseek(fd.get(), 0, SEEK_SET);  // truncated
}

int cmd_log(const Args& a) {
  po::options_description desc("gpuq log options");
  desc.add_options()("follow,f", "keep printing until the job ends")(
      "stderr", "the error file (when --error separated it)")("id", po::value<std::string>(),
                                                              "job id");
  po::positional_options_description pos;
  pos.add("id", 1);
  Parsed p;
  if (!parse(a, desc, &pos, "usage: gpuq log [-f] [--stderr] ID\nPrints a job's output file.", &p))
    return 0;
  if (!p.vm.count("id")) throw std::invalid_argument("gpuq log: no job id given");
  const std::string id = p.vm["id"].as<std::string>();
  auto job = show_one(p.socket, id);
  if (!job.value("may_read", false))
    throw std::invalid_argument(
        fmt::format("permission denied: job {} belongs to {}", id, job["user"].get<std::string>()));
  std::string path = job[p.vm.count("stderr") ? "stderr_path" : "stdout_path"].get<std::string>();
  const bool follow = p.vm.count("follow") > 0;
  int read_restarts = job.value("restart_count", 0);  // the run whose output is being read
  int64_t rerun_start_ms = 0;
  Fd fd;
  char buf[65536];
  while (true) {
    if (!fd) fd = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd && !follow) {
      if (job["state"] == "PENDING") return 0;  // nothing written yet
      throw std::runtime_error(fmt::format("cannot open {}: {}", path, strerror(errno)));
    }
    ssize_t n = 0;
    while (fd && (n = ::read(fd.get(), buf, sizeof(buf))) > 0) std::fwrite(buf, 1, n, stdout);
    std::fflush(stdout);
    if (!follow) return 0;
    if (final_state(job)) {
      if (fd)  // one last read: the job may have written just before it ended
        while ((n = ::read(fd.get(), buf, sizeof(buf))) > 0) std::fwrite(buf, 1, n, stdout);
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    // A daemon restart must not end a follow: the job keeps running and writing meanwhile.
    for (int tries = 0;; ++tries) {
      try {
        job = show_one(p.socket, id);
        // A requeue raises restart_count at once; its rerun truncates the file as it starts.
        const int restarts = job.value("restart_count", 0);
        if (restarts != read_restarts && job["state"] != "PENDING") {
          read_restarts = restarts;
          if (!job.value("open_append", false)) rerun_start_ms = job.value("start_ms", int64_t{1});
        }
        reopen_if_restarted(fd, path, rerun_start_ms);
        break;
      } catch (const std::invalid_argument&) {
        throw;  // the daemon answered with an error
      } catch (const std::exception&) {
        if (tries >= 240) throw;  // 60 s without a daemon
        while ((n = ::read(fd.get(), buf, sizeof(buf))) > 0) std::fwrite(buf, 1, n, stdout);
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
  }
}

namespace {

// history -j's note on the named jobs still pending or running: one line for each of a few, one
// line in all for many (a pending array of 1,000 tasks).
void note_unfinished(const nlohmann::json& ids) {
  constexpr size_t kEach = 3;
  if (ids.size() <= kEach) {
    for (const auto& id : ids)
      fmt::print(stderr, "gpuq: note: job {} has not finished: gpuq queue -j {} shows it\n",
                 id.get<std::string>(), id.get<std::string>());
    return;
  }
  std::vector<std::string> first;
  for (size_t i = 0; i < kEach; ++i) first.push_back(ids[i].get<std::string>());
  fmt::print(stderr,
             "gpuq: note: {} of the jobs have not finished ({}, ...): gpuq queue -j shows "
             "them\n",
             ids.size(), fmt::join(first, ", "));
}

}  // namespace

int cmd_history(const Args& a) {
  po::options_description desc("gpuq history options");
  desc.add_options()("all-users,a", "every user's jobs (root sees all by default)")(
      "user,u", po::value<std::string>(), "only these users' jobs: USER[,USER...], names or uids")(
      "jobs,j", po::value<std::string>(),
      "only these jobs, whoever ran them: ID[,ID...] (an array's id: its tasks)")(
      "limit,n", po::value<long long>()->default_value(0),
      "only the newest N jobs (0 = as many as one reply holds, 10000)")(
      "noheader", "no header lines")("json", "the daemon's JSON documents");
  Parsed p;
  if (!parse(a, desc, nullptr,
             "usage: gpuq history [-a | -u USER | -j ID,...] [-n N] [--noheader] [--json]\n"
             "Finished jobs, sacct-style: JobID JobName User State ExitCode(code:signal) Elapsed\n"
             "GPUs (how many the job held; gpuq show and gpuq stats name them) GPUHours MeanUtil.\n"
             "At most the newest 10000 jobs at once (-n 0, the default, means that many).",
             &p))
    return 0;
  // As size_t, boost read -1 as 2^64-1: every job.
  const long long limit = p.vm["limit"].as<long long>();
  if (limit < 0) throw std::invalid_argument(fmt::format("-n {}: expected 0 or more", limit));
  nlohmann::json req = {
      {"op", "history"}, {"all_users", p.vm.count("all-users") > 0}, {"limit", limit}};
  if (p.vm.count("user")) set_users(req, known_users("history", p.vm["user"].as<std::string>()));
  if (p.vm.count("jobs")) req["ids"] = job_list("history", p.vm["jobs"].as<std::string>());
  auto reply = call(p.socket, req);
  if (p.vm.count("jobs") || req.contains("users")) require_filtered("history", reply);
  note_unfinished(reply.value("active", nlohmann::json::array()));
  if (p.vm.count("json")) {
    std::cout << reply["jobs"].dump(2) << "\n";
    return 0;
  }
  std::string text = format_history(reply["jobs"], !p.vm.count("noheader"));
  std::fwrite(text.data(), 1, text.size(), stdout);
  const int64_t total = reply.value("total", int64_t{0});
  if (total > static_cast<int64_t>(reply["jobs"].size()) && limit == 0)
    fmt::print(stderr, "gpuq: note: the newest {} of {} finished jobs (-u USER narrows them)\n",
               reply["jobs"].size(), total);
  return 0;
}

}  // namespace gpurun::queue

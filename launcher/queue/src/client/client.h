// gpuq command-line front end: one function per subcommand. Each parses its own options (with
// --help), talks to the daemon and prints Slurm-shaped output; errors are thrown, and main() maps
// them to exit codes.
#pragma once

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "job/request.h"

namespace gpurun::queue {

using Args = std::vector<std::string>;  // the words after the subcommand

int cmd_submit(const Args& a);
// What gpuq keeps of a submission as text must be UTF-8: the script's or program's name, the
// directory, the #SBATCH lines (the job's name, paths, mail address), the environment's names
// and the options. Refused here, naming it, before anything is sent (the script, its arguments
// and the environment's values go as the bytes they are: json_fields::bytes_json). `shown`: how
// an error names the script.
void require_utf8_text(const SubmitRequest& req, const std::string& shown);
int cmd_queue(const Args& a);
int cmd_cancel(const Args& a);
int cmd_show(const Args& a);
int cmd_log(const Args& a);
int cmd_history(const Args& a);
int cmd_hold(const Args& a, bool hold);
int cmd_requeue(const Args& a);
int cmd_drain(const Args& a, bool drain);
int cmd_daemon(const Args& a);
int cmd_run(const Args& a);    // run.cc: like srun
int cmd_alloc(const Args& a);  // run.cc: like salloc
// srun.cc: srun inside a job (the daemon puts `srun`, this program, first on a job's PATH): the
// step's tasks on this machine with srun's variables.
int cmd_srun(const Args& a);

// `gpuq submit --wait`: polls job `id` (every task of an array) until it has ended and returns
// what sbatch --wait exits with: the job's exit code (the highest of an array's tasks), 1 for a
// job ended by a signal or that never ran to its end.
int wait_for_job(const std::string& socket, int64_t id);

// GPUQ_SOCKET, else the system socket when it exists, else the per-user one.
std::string default_socket_path();
// The caller's user name from passwd ("" when its uid has none): USER and LOGNAME for
// --export=NONE (JobRequest::apply_export), queue --me.
std::string my_user_name();

// One request to the daemon and its reply; throws std::invalid_argument with the daemon's error
// when it answers ok=false, std::runtime_error when it cannot be reached.
nlohmann::json call(const std::string& socket, const nlohmann::json& req);

// Options every client command shares (--help, --socket): parses `a` into *out; prints the usage
// and returns false for --help.
struct Parsed {
  boost::program_options::variables_map vm;
  std::string socket;
};
bool parse(const Args& a, boost::program_options::options_description& desc,
           boost::program_options::positional_options_description* pos, const std::string& usage,
           Parsed* out);

// Usage commands (client_usage.cc) and the web page (web.cc).
int cmd_stats(const Args& a);
int cmd_report(const Args& a);
int cmd_budget(const Args& a);
int cmd_web(const Args& a);

}  // namespace gpurun::queue

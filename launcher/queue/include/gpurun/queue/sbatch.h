// #SBATCH parsing for gpuq: the directive lines of a batch script and the same options on the
// command line, with Slurm's rules (sbatch.1): directives are lines that start exactly with
// "#SBATCH", values are not shell-expanded, and parsing stops at the first line that is neither a
// comment nor blank. Pure functions over strings; errors are thrown as std::invalid_argument with a
// message naming the offending text.
#pragma once

#include <string>
#include <vector>

#include "gpurun/queue/job.h"

namespace gpurun::queue {

// The #SBATCH lines sbatch reads (those before the first command), with their line numbers:
// each line's text after "#SBATCH".
struct DirectiveLine {
  int number;  // in the script, from 1
  std::string tail;
};
std::vector<DirectiveLine> directive_lines(const std::string& script);

// The option words of every #SBATCH line, in order (quotes honoured, "# comment" tails dropped).
std::vector<std::string> sbatch_directive_words(const std::string& script);

// What an option gpuq does not know as sbatch's does: a warning (in #SBATCH lines, so scripts
// with other sites' plugin options still run; a following word that is no option is its value)
// or an error (gpuq submit's command line, as in sbatch, where that word may be the script).
// Either way, a long option one or two keystrokes from an sbatch option ("--gress") is an error
// that names the option meant: a typo, whose loss would run the job without what it asked for.
enum class UnknownOptions { kWarn, kRefuse };

// Parses sbatch-style options. Stops at the first word that is not an option (the script, on the
// command line) and stores its index in *first_positional (words.size() when none).
JobRequest parse_sbatch_options(const std::vector<std::string>& words,
                                size_t* first_positional = nullptr,
                                UnknownOptions unknown = UnknownOptions::kWarn);

// parse_sbatch_options over each #SBATCH line in turn, later lines over earlier ones; a
// positional word in a directive is an error. Errors and warnings name the line ("#SBATCH line
// 4: ...").
JobRequest parse_sbatch_script(const std::string& script);

// Throws unless the script starts with "#!", as sbatch requires (the client checks before it
// parses, the daemon again before it queues).
void require_batch_script(const std::string& script);

// Slurm time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; "0", "UNLIMITED", "INFINITE" = 0 (none).
int64_t parse_time_limit(const std::string& text);

// "USR1", "SIGUSR1", "10" -> signal number; throws on unknown names.
int parse_signal_name(const std::string& text);
std::string signal_name(int sig);  // 10 -> "USR1"

SignalSpec parse_signal_spec(const std::string& text);  // [{R|B}:]SIG[@SECS]
std::vector<Dependency> parse_dependency(const std::string& text);
ArraySpec parse_array(const std::string& text);  // 0-15:4,20%2
// --gres: gpu[:type][:N] entries (summed), or shard[:K]: a job asks for whole GPUs or for shards
// of one, not both. Other GRES are refused.
struct GresRequest {
  int gpus = 0;
  int shards = 0;
  std::string type;  // gpu:TYPE[:N], when one entry names one
};
GresRequest parse_gres(const std::string& text);
// [type:]N, N from `least`, of --gpus (or `option`, named in errors).
int parse_gpus(const std::string& text, const std::string& option = "--gpus", int least = 0);
// --mail-type: NONE, ALL and kMailEventNames' names, comma-separated -> MailEvent bits. Slurm's
// other types (ARRAY_TASKS, INVALID_DEPEND, STAGE_OUT) are accepted and named in *ignored: gpuq
// sends no such mail.
unsigned parse_mail_type(const std::string& text, std::vector<std::string>* ignored);
// --mail-user: one address (user or user@host), nothing a mail header or sendmail could take for
// more (no spaces, commas, angle brackets, quotes or control characters).
std::string parse_mail_user(const std::string& text);

struct PatternVars {
  int64_t job_id = 0;
  int64_t array_job_id = 0;  // 0 = not an array task
  int array_task_id = -1;
  std::string job_name;
  std::string user;
  std::string host;
};

// Output file patterns (%j %J %A %a %x %u %N %n %t %s %%, optional zero-padding width: %4j).
// A backslash anywhere turns substitution off, as in Slurm.
std::string expand_output_pattern(const std::string& pattern, const PatternVars& vars);

}  // namespace gpurun::queue

// gpuq job model: what a submitted job asks for (JobRequest, filled from #SBATCH lines and the
// command line) and the job record the daemon stores (Job). Pure data plus string conversions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpurun::queue {

// Slurm's job states (squeue.1) that gpuq can reach.
enum class JobState { kPending, kRunning, kCompleted, kFailed, kCancelled, kTimeout, kNodeFail };

const char* state_name(JobState s);             // "PENDING", "RUNNING", ...
const char* state_code(JobState s);             // "PD", "R", ...
JobState parse_state(const std::string& name);  // inverse of state_name; throws on unknown
bool is_final(JobState s);

enum class DepKind { kAfterOk, kAfterAny, kAfterNotOk };
const char* dep_kind_name(DepKind k);

struct Dependency {
  DepKind kind = DepKind::kAfterAny;
  int64_t job_id = 0;
  // ID_T (Slurm's afterok:ID_T): task T of array job_id alone (-1: job_id itself, or every task
  // of the array job_id names).
  int task = -1;
};

struct ArraySpec {
  std::vector<int> indices;  // task ids in submit order
  int max_running = 0;       // the %N cap; 0 = no cap
};

// --signal=[B:]SIG@SECS
struct SignalSpec {
  int signal = 0;  // 0 = none
  int lead_seconds = 60;
  bool batch_only = false;  // B: signal only the batch shell, not its process group
};

// --mail-type=... and --mail-user: which of a job's events are mailed, and to whom (sbatch.1).
// ALL is BEGIN, END, FAIL and REQUEUE, as in Slurm (not the TIME_LIMIT ones). The daemon sends
// them through sendmail.
enum MailEvent : unsigned {
  kMailBegin = 1u,
  kMailEnd = 2u,
  kMailFail = 4u,
  kMailRequeue = 8u,
  kMailTimeLimit = 16u,    // reached the time limit
  kMailTimeLimit90 = 32u,  // reached 90% of it
  kMailTimeLimit80 = 64u,
  kMailTimeLimit50 = 128u,
};
constexpr unsigned kMailAll = kMailBegin | kMailEnd | kMailFail | kMailRequeue;
constexpr unsigned kMailTimeLimits =
    kMailTimeLimit | kMailTimeLimit90 | kMailTimeLimit80 | kMailTimeLimit50;
struct MailSpec {
  unsigned events = 0;  // MailEvent bits; 0 = no mail
  std::string user;     // "" = the submitting user (the local mailbox)
};
// Each MailEvent with its --mail-type name and, for the time-limit ones, the percent of the limit.
struct MailEventName {
  MailEvent event;
  const char* name;
  int percent;  // 0: not a time-limit event
};
extern const MailEventName kMailEventNames[8];
std::vector<std::string> mail_event_names(unsigned events);  // {"BEGIN", "END"}
unsigned mail_event_named(const std::string& name);          // "END" -> kMailEnd; 0: no such
// One address (user or user@host), at most kMaxMailUserBytes, with nothing a mail header or
// sendmail could take for more: no spaces, commas, brackets, quotes or control characters.
bool is_mail_address(const std::string& s);

// What one job may ask for. The #SBATCH parser (sbatch.h) produces nothing beyond these, and the
// daemon's request decoder (job/request.h) refuses anything beyond them, so the two never disagree.
constexpr int kMaxJobGpus = 1024;                     // --gres/--gpus, all entries together
constexpr int kMaxShardsPerGpu = 1024;                // --gres=shard:K, --shards-per-gpu
constexpr int64_t kMaxTimeLimitS = int64_t{1} << 40;  // the parser's largest is 3.7e11 s
constexpr int kMaxArrayIndex = 1000000;
constexpr size_t kMaxArrayTasks = 10000;
constexpr int kMaxArrayCap = 100000;  // the %N of --array
constexpr int64_t kMaxDependencyId = int64_t{1} << 50;
constexpr int kMaxSignalLeadS = 65535;  // the @SECS of --signal
constexpr int kMaxPriority = 1000000;
constexpr int kMaxCpusPerTask = 4096;
constexpr int kMaxNtasks = 1000000;
constexpr size_t kMaxMailUserBytes = 254;  // RFC 5321's longest address
constexpr size_t kMaxNameBytes = 1024;     // -J, -A; a name from the script's is cut to it
constexpr size_t kMaxPathBytes = 4095;     // -o, -e, -D, the submit folder; also once expanded

// Everything a submission asks for. Optional fields stay unset when neither the script nor the
// command line gave them, so "command line overrides script" is a field-wise merge.
struct JobRequest {
  std::optional<std::string> job_name;
  std::optional<int> gpus;
  // --gres=shard:K: K shards of one GPU, shared with other shard jobs (gpuq daemon
  // --shards-per-gpu). A --gres or --gpus sets both fields, so the later one wins whole.
  std::optional<int> shards;
  // The type of --gres=gpu:TYPE:N. A MIG profile ("1g.10gb") picks MIG devices of that profile;
  // other types are accepted and ignored, as before.
  std::optional<std::string> gpu_type;
  std::optional<int64_t> time_limit_s;  // 0 = unlimited
  std::optional<std::string> output;
  std::optional<std::string> error;
  std::optional<std::string> chdir;
  std::optional<std::vector<Dependency>> dependencies;
  std::optional<ArraySpec> array;
  std::optional<SignalSpec> signal;
  std::optional<bool> requeue;
  std::optional<bool> open_append;  // --open-mode=append (true) or truncate (false, the default)
  std::optional<bool> hold;
  std::optional<int> priority;
  std::optional<std::string> account;  // recorded for `gpuq report --by account`; no limits
  std::optional<int> cpus_per_task;    // recorded for CPU efficiency in `gpuq stats`; not enforced
  std::optional<int> ntasks;           // -n: only SLURM_NTASKS, for scripts that read it
  // --gpus-per-task [type:]N: N GPUs for each of the -n tasks (resolve_gpus_per_task()).
  std::optional<int> gpus_per_task;
  // --export: which of the submitter's variables the job gets (apply_export()); the client's
  // business, not sent to the daemon.
  std::optional<std::string> export_spec;
  std::optional<bool> wait;            // -W/--wait: `gpuq submit` waits for the job's end
  std::optional<unsigned> mail_events;  // --mail-type (MailEvent bits)
  std::optional<std::string> mail_user; // --mail-user
  std::vector<std::string> warnings;   // unsupported directives, ignored with a warning

  // Fields set in `over` replace ours (command line over #SBATCH).
  void merge_from(const JobRequest& over);
  // Once the script's and the command line's options are merged: --gpus-per-task N with -n T
  // asks for N * T GPUs, as in Slurm (the later of it and --gres/--gpus wins, as they do).
  void resolve_gpus_per_task();
  // sbatch's --export on the submitter's environment `env`: ALL (the default) keeps it,
  // ALL,A=1,B keeps it and sets A; NONE, or a list without ALL, keeps only the named variables
  // (B: its value here) over a login's basics (HOME, USER, LOGNAME, SHELL, a default PATH), as
  // Slurm then loads the user's login environment; `user` names the user for USER and LOGNAME
  // when `env` lacks them. Throws on an empty name.
  void apply_export(std::map<std::string, std::string>& env, const std::string& user = "") const;
};

// What a job used, measured by the daemon's sampler while it ran (every --sample-interval) and by
// its supervisor when it ended; kept with the job for good (raw samples expire, this does not).
struct JobUsage {
  int64_t util_samples = 0;  // GPU samples with a utilisation figure (one per GPU per tick)
  double util_sum = 0;       // their sum of percents: the mean is util_sum / util_samples
  double util_max = 0;
  double mem_max_mib = 0;  // the most memory used on any one of its GPUs
  double cpu_seconds = 0;  // user + system time of all its processes
  int64_t peak_rss_bytes = 0;
  int64_t last_sample_ms = 0;
};

// An array's task ids as Slurm describes them to each task (SLURM_ARRAY_TASK_MIN/MAX/COUNT/STEP):
// step is the distance between consecutive ids when it is the same everywhere, else 1.
// `gpuq run` and `gpuq alloc`: the client's socket, which the job's supervisor connects to for the
// job's standard input, output and error (launcher/queue/src/supervise/attach.h). An empty
// socket: a batch job.
struct AttachSpec {
  std::string socket;  // an abstract Unix socket's name, without its leading NUL
  std::string token;   // proves to the client that the connecting supervisor runs its job
  bool pty = false;    // the job's stdio is a terminal, made its controlling terminal
};
constexpr size_t kAttachTokenHex = 32;
// "gpuq-run-" then 1 to 80 of [0-9a-z-]; kAttachTokenHex lowercase hex digits.
bool valid_attach_socket(const std::string& name);
bool valid_attach_token(const std::string& token);

struct ArrayShape {
  int min = 0, max = 0, count = 0, step = 1;
};
ArrayShape array_shape(const std::vector<int>& task_ids);  // in any order

// A job as the daemon stores it. Array tasks are separate jobs sharing array_job_id.
struct Job {
  int64_t id = 0;
  int64_t array_job_id = 0;  // 0 when not an array task
  int array_task_id = -1;
  int array_max_running = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string user;
  std::string name;
  std::string account;   // -A/--account, "" when not given
  int cpus = 1;          // -c/--cpus-per-task: the cores CPU efficiency is measured against
  int ntasks = 1;        // -n/--ntasks: recorded for SLURM_NTASKS only
  uint32_t umask = 022;  // the submitter's: the job and its output files are created with it
  ArrayShape array;      // of its array, for array tasks
  JobState state = JobState::kPending;
  std::string reason;  // squeue's (Reason) for pending jobs, or why a job failed
  int priority = 0;
  int gpus_requested = 1;
  int shards = 0;          // > 0: a shard job, holding this many shards of its one GPU
  int shards_per_gpu = 0;  // its GPU's shards when it started: it is charged shards / this
  std::string mig_profile;  // --gres=gpu:PROFILE:N: only MIG devices of that profile
  int64_t time_limit_s = 0;
  bool held = false;
  bool requeue = false;     // --requeue: back to the queue after NODE_FAIL
  // --open-mode=append: the output files are appended to, not truncated; also by a rerun after
  // a requeue, which otherwise starts them afresh (Slurm's defaults too).
  bool open_append = false;
  bool no_requeue = false;  // --no-requeue given: `gpuq requeue` refuses it, as scontrol does
  bool cancel_requested = false;
  // `gpuq requeue` asked for it: when the run ends (however), the job goes back to the queue.
  bool requeue_requested = false;
  // Running and being stopped (cancelled, requeued or past its time limit; until it ends or
  // KillWait kills it): Slurm's COMPLETING, CG.
  bool completing(int64_t now_ms) const {
    return state == JobState::kRunning &&
           (cancel_requested || requeue_requested ||
            (time_limit_s > 0 && now_ms >= start_ms + time_limit_s * 1000));
  }
  int restart_count = 0;
  // The GPU-seconds (gpu_share x time) of the runs that ended in a requeue; start_ms, end_ms,
  // gpus and usage are the last run's, as sacct shows it.
  double earlier_gpu_seconds = 0;
  int64_t submit_ms = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  std::vector<int> gpus;  // allocated GPU ids while running, kept afterwards for history
  JobUsage usage;
  int exit_code = 0;
  int exit_signal = 0;
  std::vector<Dependency> dependencies;
  SignalSpec signal;
  MailSpec mail;
  unsigned mail_sent = 0;  // the time-limit mails sent for the current run (MailEvent bits)
  std::string submit_key;
  std::string boot_id;  // the machine's boot while RUNNING: a different one means it rebooted
  const char* sched_reason = nullptr;  // daemon memory only: the last scheduling verdict
  int position = 0;                    // daemon memory only: its place in the order (1 = next)
  int64_t expected_start_ms = 0;       // daemon memory only: squeue --start's (0: unknown)
  // Spec fields that are only needed to start the job.
  std::string script;
  std::vector<std::string> args;
  std::string cwd;
  std::string output_pattern;
  std::string error_pattern;  // empty = stderr goes to the output file
  std::map<std::string, std::string> env;
  AttachSpec attach;  // gpuq run/alloc's client; empty for batch jobs
};

// Mean GPU utilisation (percent) over the job's samples; nullopt when it has none.
std::optional<double> util_mean(const JobUsage& u);
// GPU-seconds the job's last (or current) run held: its GPUs (a shard job: the share of its GPU
// it held) times its run time (until now_ms while it runs), as Slurm bills allocated GPUs,
// however busy they were.
double gpu_seconds(const Job& j, int64_t now_ms);
// gpu_seconds() and the earlier runs' (earlier_gpu_seconds): all the GPU time the job has used.
double all_runs_gpu_seconds(const Job& j, int64_t now_ms);
// The GPUs a job is charged for holding: its GPUs, or a shard job's share of its one GPU.
double gpu_share(const Job& j);

// Whether a --gres GPU type names a MIG profile: "1g.10gb", "3g.40gb", "1g.10gb+me" (NVIDIA's MIG
// User Guide, "Supported MIG Profiles").
bool is_mig_profile(const std::string& type);

// "12" or "12_3" for array tasks (squeue's JOBID column).
std::string display_id(const Job& j);

// Comma list <-> ids ("0,1,3"; parsing also takes ranges, "0-3,6", at most 4,096 ids).
std::string join_ids(const std::vector<int>& ids);
std::vector<int> parse_id_list(const std::string& text);  // throws naming the text

}  // namespace gpurun::queue

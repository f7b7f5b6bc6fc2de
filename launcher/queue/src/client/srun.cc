// srun inside a gpuq job (client.h, cmd_srun): Slurm's srun needs a controller to give it a job
// step, and in a gpuq job there is none (Debian's srun stops with "Could not establish a
// configuration source"), so every cluster script that ran `srun python train.py` failed. The
// daemon puts STATE/bin first on a job's PATH, where `srun` is this program; it runs the step on
// this machine as srun runs one on one node: N copies of the command (-n, default the job's
// SLURM_NTASKS), each with srun's task variables (SLURM_PROCID, SLURM_LOCALID, ...) and every
// GPU of the job (srun hands them all to each task unless told otherwise), output passed through
// (or each line labelled with its task, -l), signals forwarded, and the highest exit status.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/env.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/strings.h"
#include "gpurun/queue/job.h"

namespace gpurun::queue {
namespace {

constexpr int kMaxTasks = 4096;

constexpr const char* kUsage =
    "usage: srun [-n N] [-l] [-K] [OPTIONS] CMD [ARGS...]   (inside a gpuq job)\n"
    "Runs N copies of CMD on this machine (default: the job's -n, SLURM_NTASKS), each with srun's\n"
    "task variables (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS, SLURM_STEP_*) and\n"
    "every GPU of the job, and exits with the highest status of them (128+N for signal N).\n"
    "  -n/--ntasks N          tasks (at most the job's cores are not checked: one machine)\n"
    "  -l/--label             prefix each output line with its task ('0: ...')\n"
    "  -K/--kill-on-bad-exit  stop the other tasks when one exits non-zero\n"
    "  -c/--cpus-per-task N   SLURM_CPUS_PER_TASK for the tasks\n"
    "  -N/--nodes 1           one machine: more is refused\n"
    "  --gpus-per-task N      task t gets the job's GPUs t*N .. t*N+N-1 (else each task has all)\n"
    "  --export ALL|NONE|NIL|[ALL,]NAME[=VALUE],...\n"
    "                         the tasks' environment, as gpuq submit's\n"
    "  -D/--chdir DIR         the tasks' directory\n"
    "Accepted and ignored (one machine, the job's resources): placement, binding, memory and\n"
    "accounting options (--mpi, --cpu-bind, --gres, --gpus, --mem, --ntasks-per-node, -w, -p,\n"
    "-A, --qos, --hint, --jobid, ...), and -u, -Q, -v, -X, --exclusive, --overlap, --no-kill.\n"
    "Each step has step id 0, and steps run at once share the job's GPUs (use --gpus-per-task\n"
    "or set CUDA_VISIBLE_DEVICES per step). Refused: -n above the job's tasks, -N above 1,\n"
    "-o/--output, -e/--error, -i/--input, --pty (run CMD itself, or gpuq run --pty).";

struct Step {
  int tasks = 0;
  bool label = false;
  bool kill_on_bad_exit = false;
  std::optional<int> cpus_per_task;
  std::optional<int> gpus_per_task;  // each task its own of the job's GPUs
  std::optional<std::string> export_spec, chdir;
  std::vector<std::string> cmd;
};

int count_of(const std::string& opt, const std::string& v, int max) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < 1 || n > max)
    throw std::invalid_argument(
        fmt::format("srun {} '{}': expected a whole number from 1 to {}", opt, v, max));
  return int(n);
}

// The value of option `name` at a[*i] ("--x=v", "-xv", or "--x v"/"-x v"), advancing *i.
std::string value_of(const std::vector<std::string>& a, size_t* i, const std::string& name) {
  const std::string& w = a[*i];
  if (w.size() > name.size() && w.rfind(name, 0) == 0)
    return w.substr(name.size() + (w[name.size()] == '=' ? 1 : 0));
  if (*i + 1 >= a.size()) throw std::invalid_argument(fmt::format("srun {} needs a value", name));
  return a[++*i];
}

bool is(const std::string& w, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const std::string s = n;
    if (w == s || (s.size() > 2 && w.rfind(s + "=", 0) == 0) ||
        (s.size() == 2 && w.size() > 2 && w.rfind(s, 0) == 0 && s[1] != '-'))
      return true;
  }
  return false;
}

// Options srun takes that change nothing for tasks run here, on the job's one machine and with
// its resources: flags, and options with a value (ignored with it).
const std::set<std::string> kIgnoredFlags = {
    "--kill-on-bad-exit=0", "-K0", "-u", "--unbuffered", "--exclusive", "--overlap", "-Q",
    "--quiet", "-v", "--verbose", "-X", "--disable-status", "-k", "--no-kill", "--propagate",
    "-O", "--overcommit"};
const std::initializer_list<const char*> kIgnoredWithValue = {
    "--mpi", "--cpu-bind", "--gres", "--gpus", "-G", "--gpu-bind", "--mem", "--mem-per-cpu",
    "--mem-per-gpu", "--cpus-per-gpu", "--gpus-per-node", "--ntasks-per-node", "--ntasks-per-gpu",
    "--ntasks-per-core", "--ntasks-per-socket", "-m", "--distribution", "-t", "--time", "-J",
    "--job-name", "--jobid", "-w", "--nodelist", "-x", "--exclude", "-p", "--partition", "-A",
    "--account", "--qos", "-q", "--comment", "--hint", "--threads-per-core", "--cpu-freq",
    "--gres-flags", "--network", "--accel-bind", "--open-mode", "--reservation", "--constraint",
    "-C", "--mem-bind", "--wckey", "--profile", "--acctg-freq", "--gpu-freq", "-W", "--wait"};

Step parse_step(const std::vector<std::string>& a) {
  Step s;
  size_t i = 0;
  for (; i < a.size() && a[i].size() > 1 && a[i][0] == '-'; ++i) {
    const std::string& w = a[i];
    if (w == "--") {
      ++i;
      break;
    }
    const std::string name = w.rfind("--", 0) == 0 ? w.substr(0, w.find('=')) : w.substr(0, 2);
    if (is(w, {"-n", "--ntasks"})) {
      s.tasks = count_of(name, value_of(a, &i, name), kMaxTasks);
    } else if (is(w, {"-N", "--nodes"})) {
      const std::string v = value_of(a, &i, name);
      if (v != "1" && v != "1-1")
        throw std::invalid_argument(fmt::format(
            "srun {} {}: a gpuq job has one machine (run the tasks here with -n)", name, v));
    } else if (is(w, {"-c", "--cpus-per-task"})) {
      s.cpus_per_task = count_of(name, value_of(a, &i, name), 1 << 16);
    } else if (w == "-l" || w == "--label") {
      s.label = true;
    } else if (w == "-K" || w == "-K1" || w == "--kill-on-bad-exit" ||
               w == "--kill-on-bad-exit=1") {
      s.kill_on_bad_exit = true;
    } else if (is(w, {"--gpus-per-task"})) {
      const std::string v = value_of(a, &i, name);
      s.gpus_per_task = count_of(name, v.substr(v.rfind(':') + 1), 1 << 10);
    } else if (is(w, {"--export"})) {
      s.export_spec = value_of(a, &i, name);
    } else if (is(w, {"-D", "--chdir"})) {
      s.chdir = value_of(a, &i, name);
    } else if (kIgnoredFlags.count(w) || w.rfind("--propagate=", 0) == 0) {
    } else if (is(w, kIgnoredWithValue)) {
      value_of(a, &i, name);
    } else if (is(w, {"-o", "--output", "-e", "--error", "-i", "--input"}) || w == "--pty") {
      throw std::invalid_argument(fmt::format(
          "srun {}: not supported inside a gpuq job (the tasks write to the job's output; "
          "redirect in the script, or use gpuq run --pty for a terminal)",
          name));
    } else {
      throw std::invalid_argument(
          fmt::format("srun: option '{}' is not supported inside a gpuq job (srun --help)", w));
    }
  }
  s.cmd.assign(a.begin() + long(i), a.end());
  if (s.cmd.empty()) throw std::invalid_argument("srun: no command given (srun --help)");
  return s;
}

// A CUDA_VISIBLE_DEVICES list's ids ("" for a CPU job: none).
std::vector<std::string> split_ids(const std::string& list) {
  return list.empty() ? std::vector<std::string>{} : common::split(list, ',');
}

// The job's environment plus task `t`'s variables, as srun sets them on one node.
std::vector<std::string> task_env(const Step& s, int t, const std::string& host) {
  std::map<std::string, std::string> env = queue_env().all;
  if (s.export_spec) {
    JobRequest r;
    r.export_spec = s.export_spec;
    r.apply_export(env, my_user_name());
    for (const auto& [k, v] : queue_env().all)  // the job's own variables stay, as in Slurm
      if (k.rfind("SLURM_", 0) == 0 || k.rfind("GPUQ_", 0) == 0 || k == "CUDA_VISIBLE_DEVICES")
        env.insert({k, v});
  }
  if (s.gpus_per_task) {  // task t: GPUs t*N .. t*N+N-1 of the job's
    const auto all = split_ids(env["CUDA_VISIBLE_DEVICES"]);
    std::string mine;
    for (int g = t * *s.gpus_per_task; g < (t + 1) * *s.gpus_per_task; ++g)
      mine += (mine.empty() ? "" : ",") + all.at(size_t(g));
    env["CUDA_VISIBLE_DEVICES"] = mine;
  }
  if (const auto gpus = env.find("CUDA_VISIBLE_DEVICES"); gpus != env.end() && !gpus->second.empty())
    env["SLURM_STEP_GPUS"] = gpus->second;  // a CPU job's step has none
  const std::string n = std::to_string(s.tasks);
  for (const auto& [k, v] : std::map<std::string, std::string>{
           {"SLURM_PROCID", std::to_string(t)}, {"SLURM_LOCALID", std::to_string(t)},
           {"SLURM_NODEID", "0"}, {"SLURM_NTASKS", n}, {"SLURM_NPROCS", n},
           {"SLURM_STEP_ID", "0"}, {"SLURM_STEPID", "0"}, {"SLURM_STEP_NUM_TASKS", n},
           {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_STEP_NODELIST", host},
           {"SLURM_STEP_TASKS_PER_NODE", n}, {"SLURM_TASKS_PER_NODE", n}})
    env[k] = v;
  if (s.cpus_per_task) env["SLURM_CPUS_PER_TASK"] = std::to_string(*s.cpus_per_task);
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

struct Task {
  pid_t pid = -1;
  int out = -1, err = -1;  // with --label: the read ends of its stdout and stderr
  std::string out_part, err_part;
  int status = -1;  // its wait status once reaped
};

pid_t start(const Step& s, int t, const std::string& host, Task* task) {
  int po[2] = {-1, -1}, pe[2] = {-1, -1};
  if (s.label && (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0))
    throw std::runtime_error(fmt::format("srun: pipe: {}", strerror(errno)));
  const auto env = task_env(s, t, host);
  std::vector<char*> argv, envp;
  for (const auto& w : s.cmd) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(fmt::format("srun: fork: {}", strerror(errno)));
  if (pid == 0) {
    // A group of its own, as a Slurm task is not in the batch shell's: the job's signals reach
    // it once, through srun (the supervisor's sweep of the job's session still ends it).
    setpgid(0, 0);
    if (s.label) dup2(po[1], 1), dup2(pe[1], 2);
    if (s.chdir && ::chdir(s.chdir->c_str()) != 0) {
      const std::string msg = fmt::format("srun: error: task {}: chdir {}: {}\n", t, *s.chdir,
                                          strerror(errno));
      ssize_t ignored = ::write(2, msg.data(), msg.size());
      (void)ignored;
      _exit(1);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    const std::string msg =
        fmt::format("srun: error: task {}: {}: {}\n", t, s.cmd[0], strerror(errno));
    ssize_t ignored = ::write(2, msg.data(), msg.size());
    (void)ignored;
    _exit(errno == ENOENT ? 127 : 126);
  }
  if (s.label) {
    ::close(po[1]), ::close(pe[1]);
    fcntl(po[0], F_SETFL, O_NONBLOCK), fcntl(pe[0], F_SETFL, O_NONBLOCK);
    task->out = po[0], task->err = pe[0];
  }
  return pid;
}

// Passes a task's output on, a whole line at a time with its label; false at end of file.
bool pass_on(int fd, int to, int t, std::string* part) {
  char buf[65536];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!part->empty()) common::write_all(to, fmt::format("{}: {}\n", t, *part));
    part->clear();
    return false;
  }
  part->append(buf, size_t(n));
  std::string lines;
  for (size_t nl; (nl = part->find('\n')) != std::string::npos; part->erase(0, nl + 1))
    lines += fmt::format("{}: {}", t, part->substr(0, nl + 1));
  if (!lines.empty()) common::write_all(to, lines);
  return true;
}

int exit_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs the step: signals that reach srun (the job's --signal, gpuq cancel's SIGTERM) go to every
// task; with -K, the first task that fails stops the rest.
int run_step(const Step& s) {
  const std::string host = queue_env().nodelist.value_or("localhost");  // gpuq's: this host
  sigset_t fwd;
  sigemptyset(&fwd);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCONT}) sigaddset(&fwd, sig);
  sigprocmask(SIG_BLOCK, &fwd, nullptr);
  const int sfd = signalfd(-1, &fwd, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) throw std::runtime_error(fmt::format("srun: signalfd: {}", strerror(errno)));
  std::vector<Task> tasks(size_t(s.tasks));
  try {
    for (int t = 0; t < s.tasks; ++t) tasks[size_t(t)].pid = start(s, t, host, &tasks[size_t(t)]);
  } catch (...) {  // none of a half-started step stays behind
    for (const auto& t : tasks)
      if (t.pid > 0) ::kill(t.pid, SIGKILL), ::waitpid(t.pid, nullptr, 0);
    throw;
  }
  int left = s.tasks;
  bool stopping = false;
  while (left > 0) {
    std::vector<pollfd> fds{{sfd, POLLIN, 0}};
    for (const auto& t : tasks) {
      if (t.out >= 0) fds.push_back({t.out, POLLIN, 0});
      if (t.err >= 0) fds.push_back({t.err, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 100);
    signalfd_siginfo si{};
    while (::read(sfd, &si, sizeof(si)) == ssize_t(sizeof(si)))
      for (const auto& t : tasks)
        if (t.status < 0) ::kill(t.pid, int(si.ssi_signo));
    for (size_t k = 0; k < tasks.size(); ++k) {
      Task& t = tasks[k];
      if (t.out >= 0 && !pass_on(t.out, 1, int(k), &t.out_part)) ::close(t.out), t.out = -1;
      if (t.err >= 0 && !pass_on(t.err, 2, int(k), &t.err_part)) ::close(t.err), t.err = -1;
      if (t.status >= 0 || t.out >= 0 || t.err >= 0) continue;
      int st = 0;
      if (::waitpid(t.pid, &st, WNOHANG) != t.pid) continue;
      t.status = st;
      --left;
      if (exit_of(st) != 0) {
        fmt::print(stderr, "srun: error: task {}: {} {}\n", k,
                   WIFEXITED(st) ? "Exited with exit code" : "Killed by signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        if (s.kill_on_bad_exit && !stopping) {
          stopping = true;
          for (const auto& o : tasks)
            if (o.status < 0) ::kill(o.pid, SIGTERM);
        }
      }
    }
  }
  int rc = 0;
  for (const auto& t : tasks) rc = std::max(rc, exit_of(t.status));
  return rc;
}

}  // namespace

int cmd_srun(const Args& a) {
  if (!a.empty() && (a[0] == "-h" || a[0] == "--help")) {
    fmt::print("{}\n", kUsage);
    return 0;
  }
  Step s = parse_step(a);
  if (!queue_env().job_id)
    throw std::invalid_argument(
        "srun: not inside a gpuq job (GPUQ_JOB_ID is unset): this srun runs a job's tasks; "
        "submit the script with gpuq submit, or run a command as a job with gpuq run");
  const auto& n = queue_env().ntasks;
  const int job_tasks = n ? count_of("(SLURM_NTASKS)", *n, kMaxTasks) : 1;
  if (s.tasks == 0) s.tasks = job_tasks;
  if (s.tasks > job_tasks)  // Slurm: "More processors requested than permitted"
    throw std::invalid_argument(fmt::format(
        "srun: -n {} is more than the job's {} task(s) (submit it with -n {})", s.tasks, job_tasks,
        s.tasks));
  if (s.gpus_per_task) {
    const size_t have = split_ids(queue_env().all.count("CUDA_VISIBLE_DEVICES")
                                      ? queue_env().all.at("CUDA_VISIBLE_DEVICES")
                                      : "")
                            .size();
    if (size_t(*s.gpus_per_task) * size_t(s.tasks) > have)
      throw std::invalid_argument(fmt::format(
          "srun: --gpus-per-task {} for {} task(s) needs {} GPUs; the job has {}",
          *s.gpus_per_task, s.tasks, *s.gpus_per_task * s.tasks, have));
  }
  return run_step(s);
}

}  // namespace gpurun::queue

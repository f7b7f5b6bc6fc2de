// gpuq daemon: start-up, the state directory and the poll loop (daemon.h).
#include "daemon/daemon.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "daemon/store.h"
#include "supervise/runfiles.h"

namespace gpurun::queue {
namespace {

// The state directory holds every job's environment (API tokens) and script: it and each folder
// in it must be the daemon's alone. One that another user owns or may write into is refused (they
// could have planted files or links there); the daemon's own are set to `mode`.
void secure_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create {}: {}", path, strerror(errno)));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("state directory {} is not a directory", path));
  if (st.st_uid != geteuid())
    throw std::runtime_error(fmt::format(
        "state directory {} belongs to uid {}, not to uid {} that runs the daemon: it must be "
        "the daemon's alone (the job store holds every job's environment)",
        path, st.st_uid, geteuid()));
  // A shared folder (/tmp, sticky) is meant for everyone: a folder of its own is the answer there,
  // never a chmod of it.
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    throw std::runtime_error(fmt::format(
        "state directory {} is writable by {} (mode {:04o}): it must be the daemon's alone; {}",
        path, st.st_mode & S_IWOTH ? "every user" : "its group", st.st_mode & 07777,
        st.st_mode & S_ISVTX
            ? "it is a shared folder: give --state-dir a folder of the daemon's own (such as "
              "/var/lib/gpuq, made for it)"
            : fmt::format("chmod go-w {} after checking what is in it", path)));
  ::chmod(path.c_str(), mode);
}

// Files of stores written before the daemon made them 0600 (jobs.db was 0644: anyone could read
// every job's environment).
void tighten(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077))
    ::chmod(path.c_str(), st.st_mode & 0700);
}

}  // namespace

Daemon::Daemon(DaemonConfig cfg)
    : cfg_(std::move(cfg)),
      clients_(cfg_.socket_path, geteuid() == 0 ? Connections::Access::kEveryone
                                                : Connections::Access::kOwnerOnly),
      mailer_(cfg_.sendmail, cfg_.state_dir + "/run"),
      mps_(cfg_.mps_control, cfg_.state_dir + "/mps"),
      watch_(cfg_.watch) {
  as_root_ = geteuid() == 0;
  // Everything the daemon and its supervisors create is theirs alone unless made otherwise on
  // purpose (the socket, a job's script; a job's output follows the submitter's umask).
  ::umask(077);
  secure_dir(cfg_.state_dir, 0711);  // jobs reach their own script in spool/
  run_dir_ = cfg_.state_dir + "/run";
  spool_dir_ = cfg_.state_dir + "/spool";
  secure_dir(run_dir_, 0700);
  secure_dir(spool_dir_, 0711);  // jobs must reach their own script, but not list others'
  // First on every job's PATH: `srun`, this program, which runs a step's tasks here (a cluster
  // script's `srun python train.py`; Slurm's srun finds no controller in a gpuq job).
  bin_dir_ = cfg_.state_dir + "/bin";
  secure_dir(bin_dir_, 0755);
  for (const char* f : {"/jobs.db", "/jobs.db-wal", "/jobs.db-shm", "/daemon.lock"})
    tighten(cfg_.state_dir + f);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  host_ = host;
  if (auto b = read_file(cfg_.boot_id_file)) boot_id_ = b->substr(0, b->find('\n'));
  if (auto dot = host_.find('.'); dot != std::string::npos) host_.resize(dot);
  lock_state_dir();
  link_srun();  // after the lock: a daemon started twice by mistake leaves running jobs' alone
  store_ = std::make_unique<Store>(cfg_.state_dir + "/jobs.db");
  draining_ = store_->meta("draining", "0") == "1";
  jobs_ = std::make_unique<JobTable>(*store_);
  accounting_ = std::make_unique<Accounting>(*store_, cfg_.fairshare_half_life_s);
  // Supervisors are re-executions of this binary; SIG_IGN reaps them automatically, and their
  // exits are seen through pidfds, which work for adopted (non-child) supervisors too.
  signal(SIGCHLD, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  recover();
  restore_idle_runs();
  check_invariants("after recovery");
  clients_.open();
}

Daemon::~Daemon() = default;

// STATE/bin/srun -> this program, replaced atomically (a job never finds it missing).
void Daemon::link_srun() {
  if (cfg_.self_exe.empty()) return;
  const std::string srun = bin_dir_ + "/srun", tmp = srun + ".new";
  ::unlink(tmp.c_str());
  if (::symlink(cfg_.self_exe.c_str(), tmp.c_str()) != 0 ||
      ::rename(tmp.c_str(), srun.c_str()) != 0)
    throw std::runtime_error(fmt::format("cannot create {}: {}", srun, strerror(errno)));
}

// One daemon per state dir. A killed daemon's lock can linger for a moment in a forked child that
// has not exec'd yet, so this retries briefly before giving up.
void Daemon::lock_state_dir() {
  std::string lock_path = cfg_.state_dir + "/daemon.lock";
  lock_fd_ = Fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock_fd_)
    throw std::runtime_error(fmt::format("cannot open {}: {}", lock_path, strerror(errno)));
  for (int i = 0;; ++i) {
    if (flock(lock_fd_.get(), LOCK_EX | LOCK_NB) == 0) return;
    if (i == 100)
      throw std::runtime_error(
          fmt::format("another gpuq daemon holds {} (one daemon per state directory)", lock_path));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The turn's batch is committed; only then do the jobs it marked RUNNING get their supervisors.
void Daemon::end_turn() {
  store_->commit_batch();
  remove_cleanup_files();
  send_requeue_stops();
  std::vector<int64_t> spawn;
  spawn.swap(to_spawn_);
  for (int64_t id : spawn) {
    Job* j = jobs_->find(id);
    if (!j) continue;
    try {
      spawn_supervisor(*j);
    } catch (const std::exception& e) {
      fmt::print(stderr, "gpuq daemon: cannot start job {}: {}\n", id, e.what());
      finish(*j, JobState::kFailed, 1, 0, now_ms(), e.what());
    }
  }
  publish_targets();
  check_invariants("at the end of a turn");
}

// SIGTERM or SIGINT arrived (SIGHUP is ignored): the socket goes, the jobs stay.
bool Daemon::stop_requested() {
  signalfd_siginfo si{};
  if (::read(signal_fd_.get(), &si, sizeof(si)) <= 0 || si.ssi_signo == SIGHUP) return false;
  fmt::print(stderr,
             "gpuq daemon: signal {}, exiting; running jobs continue and are adopted by the next "
             "daemon\n",
             si.ssi_signo);
  clients_.remove_socket();
  return true;
}

int Daemon::run() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  signal_fd_ = Fd(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  start_sampling();
  fmt::print(stderr, "gpuq daemon: {} GPUs [{}], socket {}, state {}\n", cfg_.gpus.size(),
             join_ids(cfg_.gpus), cfg_.socket_path, cfg_.state_dir);
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({clients_.listen_fd(), POLLIN, 0});
    fds.push_back({signal_fd_.get(), POLLIN, 0});
    fds.push_back({sampler_ ? sampler_->fd() : -1, POLLIN, 0});  // fd -1: poll skips it
    const size_t runner_base = fds.size();
    std::vector<int64_t> runner_ids;
    for (auto& [id, r] : runners_) {
      if (!r.pidfd) continue;
      fds.push_back({r.pidfd.get(), POLLIN, 0});
      runner_ids.push_back(id);
    }
    clients_.add_to_poll(fds);
    // Runners without a pidfd (pidfd_open unavailable) are polled every 100 ms.
    bool polling = runner_ids.size() < runners_.size();
    int rc = ::poll(fds.data(), fds.size(), dirty_ ? 0 : polling ? 100 : 1000);
    if (rc < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("poll: {}", strerror(errno)));
    if (rc == 0 && !polling) store_->checkpoint();  // a quiet second: no client waits on it
    if ((fds[1].revents & POLLIN) && stop_requested()) return 0;
    turn(fds, runner_base, runner_ids, polling);
    clients_.flush(now_ms());
    if (fds[0].revents & POLLIN) clients_.accept();
  }
}

// Everything one turn writes is committed once, before replies go out and before any supervisor
// starts: one WAL fsync per turn however many jobs ended, started or arrived.
void Daemon::turn(const std::vector<pollfd>& fds, size_t runner_base,
                  const std::vector<int64_t>& runner_ids, bool polling) {
  store_->begin_batch();
  for (size_t i = 0; i < runner_ids.size(); ++i)
    if (fds[runner_base + i].revents) on_supervisor_exit(runner_ids[i]);
  if (fds[2].revents & POLLIN) on_usage_ticks();
  if (polling) {
    std::vector<int64_t> gone;
    for (auto& [id, r] : runners_)
      if (!r.pidfd && ::kill(r.pid, 0) != 0 && errno == ESRCH) gone.push_back(id);
    for (auto id : gone) on_supervisor_exit(id);
  }
  clients_.serve(fds, [this](const Request& req, const Peer& peer) { return handle(req, peer); });
  mail_time_limits(now_ms());
  enforce_budgets(now_ms());
  cancel_abandoned_runs(now_ms());
  if (dirty_) {
    dirty_ = false;
    schedule_pass();
  }
  end_turn();
}

}  // namespace gpurun::queue

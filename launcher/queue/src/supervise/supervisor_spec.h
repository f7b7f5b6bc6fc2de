// supervisor_spec.h: what the gpuq daemon hands a job's supervisor, STATE/run/N.spec. The daemon
// resolves everything first (output paths expanded, the job's whole environment), so the
// supervisor decides nothing the daemon already decided; the file is written once, whole
// (write_spec), before the supervisor starts, and read once by it (read_spec). Every field is
// checked on reading, and an error names the file and the field.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpurun/queue/job.h"

namespace gpurun::queue {

struct SupervisorSpec {
  // The file's format. Files without "version" (written by an older daemon, whose self_exe is
  // this binary after an upgrade) have the same fields and are read as version 1.
  static constexpr int kVersion = 1;

  int64_t job_id = 0;
  uint32_t uid = 0, gid = 0;
  std::string user;
  std::string host;      // for Slurm's "*** JOB N ON host CANCELLED ***" line
  uint32_t umask = 022;  // the submitter's: the job and its output files get it
  std::string cwd;
  std::string script_path;  // where the supervisor writes the script (spool/N.sh) and runs it
  std::string script;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;  // the job's whole environment
  std::string output;                      // absolute path
  std::string error;                       // absolute path, or "" for stderr into the output
  bool append_output = false;  // --open-mode=append: no truncation
  int64_t start_ms = 0;
  int64_t time_limit_s = 0;      // 0 = none
  SignalSpec signal;             // --signal: signal 0 = none
  int kill_wait_s = 30;          // SIGKILL this long after SIGTERM (Slurm's KillWait)
  bool drop_privileges = false;  // the daemon runs as root: become uid/gid first
  // gpuq run/alloc: the job's stdio comes from this client socket (attach.h), not from output
  // and error, which are then unused. Empty socket: a batch job.
  AttachSpec attach;
};

nlohmann::json spec_to_json(const SupervisorSpec& s);
// Throws std::invalid_argument "job spec FILE: field 'F': expected ..., got ..." (`file` names
// the document in errors).
SupervisorSpec spec_from_json(const nlohmann::json& o, const std::string& file);

// 0600, atomically (no fsync: a supervisor that did not start after a crash never reads it).
void write_spec(const std::string& path, const SupervisorSpec& s);
// Throws std::invalid_argument naming `path`: missing, not JSON, or a bad field.
SupervisorSpec read_spec(const std::string& path);

}  // namespace gpurun::queue

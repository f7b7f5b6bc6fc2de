// system.cc: see system.h.
#include "sys/system.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "alloc/env_util.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/run_capture.h"
#include "gpurun/gpuinfo/gpu_count.h"
#include "gpurun/launcher/error.h"
#include "gpurun/launcher/launch.h"
#include "sys/proc_util.h"

extern char** environ;

namespace gpurun::launcher::sys {

Env process_env() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

namespace {

constexpr int kPipeReadMs = 10000;  // a pipe that stays silent this long is given up

// Reads all of `fd` (a regular file or a pipe) up to kMaxInputFileBytes; throws Error saying why.
std::string read_all_bounded(int fd, bool pipe) {
  std::string out;
  std::vector<char> buf(1 << 20);
  // A larger pipe: fewer wake-ups for a writer that sends much (up to the bound).
  if (pipe) fcntl(fd, F_SETPIPE_SZ, 1 << 20);
  const double deadline = proc::now_seconds() + kPipeReadMs / 1000.0;
  while (true) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n == 0) return out;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && pipe) {
      const int left = static_cast<int>((deadline - proc::now_seconds()) * 1000);
      pollfd p{fd, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, left) == 0)
        throw Error(fmt::format("the pipe sent nothing for {} s", kPipeReadMs / 1000));
      continue;
    }
    if (n < 0) throw Error(fmt::format("cannot be read: {}", strerror(errno)));
    out.append(buf.data(), static_cast<std::size_t>(n));
    if (out.size() > kMaxInputFileBytes)
      throw Error(fmt::format("holds more than {} MiB: not a host or environment file",
                              kMaxInputFileBytes >> 20));
  }
}

}  // namespace

std::optional<std::string> read_input_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO with no writer must not wait forever.
  common::Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) return std::nullopt;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return std::nullopt;
  if (S_ISDIR(st.st_mode)) throw Error("is a folder, not a file");
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
    throw Error("is a device or a socket, not a file");
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > kMaxInputFileBytes)
    throw Error(fmt::format("is {} bytes: at most {} MiB are read from a host or environment file",
                            st.st_size, kMaxInputFileBytes >> 20));
  return read_all_bounded(fd.get(), S_ISFIFO(st.st_mode));
}

Env read_env_file(const std::string& path) {
  std::optional<std::string> text;
  try {
    text = read_input_file(path);
  } catch (const Error& e) {
    throw Error(fmt::format("--env-file {}: {}", detail::shown(path), e.what()));
  }
  if (!text) throw Error(fmt::format("--env-file {}: cannot be read", detail::shown(path)));
  if (auto nul = text->find('\0'); nul != std::string::npos)
    throw Error(
        fmt::format("--env-file {}: a NUL byte at offset {}: not an environment dump (a "
                    "binary file?)",
                    detail::shown(path), nul));
  return detail::parse_env_text(*text, "--env-file " + detail::shown(path));
}

int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int gpu_count(const Env& env) {
  gpuinfo::SamplerConfig cfg;
  if (auto smi = detail::get(env, "GPURUN_NVIDIA_SMI")) cfg.nvidia_smi = *smi;
  return static_cast<int>(gpuinfo::count_gpus(cfg).ids.size());
}

std::optional<std::string> find_tool(const Env& env, const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name == "blaunch" || name == "jsrun") {
    if (auto bindir = detail::get(env, "LSF_BINDIR"))
      if (executable(*bindir + "/" + name)) return *bindir + "/" + name;
  }
  auto path = detail::get(env, "PATH");
  if (!path) return std::nullopt;
  std::size_t b = 0;
  while (b <= path->size()) {
    std::size_t e = path->find(':', b);
    if (e == std::string::npos) e = path->size();
    std::string dir = path->substr(b, e - b);
    if (!dir.empty() && executable(dir + "/" + name)) return dir + "/" + name;
    b = e + 1;
  }
  return std::nullopt;
}

std::vector<std::string> srun_mpi_plugins(const std::string& srun) {
  std::string cmd = shell_quote(srun) + " --mpi=list 2>&1";
  std::vector<std::string> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 512> buf{};
  std::string text;
  while (fgets(buf.data(), buf.size(), p)) text += buf.data();
  pclose(p);
  // 22.05 prints "srun: MPI types are...\nsrun: none\nsrun: pmix\n"; 23.x prints "MPI plugin
  // types are...\n\tnone\n\tpmix\n": take the last word of each line.
  for (const auto& line : detail::split_lines(text)) {
    auto w = detail::split_ws(line);
    if (w.empty()) continue;
    const std::string& last = w.back();
    if (last.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos &&
        w.size() <= 2)
      out.push_back(last);
  }
  return out;
}

bool srun_has_pyxis(const std::string& srun) {
  try {
    return common::run_capture({srun, "--help"}, 10000).output.find("--container-image") !=
           std::string::npos;
  } catch (const Error&) {
    return false;
  }
}

std::optional<std::string> scontrol_show_job(const Env& env, const std::string& job_id,
                                             JobDetail detail) {
  auto scontrol = find_tool(env, "scontrol");
  if (!scontrol || job_id.empty() || job_id.find_first_not_of("0123456789_") != std::string::npos)
    return std::nullopt;
  std::vector<std::string> argv{*scontrol};
  if (detail == JobDetail::per_node) argv.push_back("-d");
  argv.insert(argv.end(), {"show", "job", job_id});
  try {
    auto r = common::run_capture(argv, 10000);
    if (r.exit_code != 0) return std::nullopt;
    return r.output;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::int64_t> slurm_end_time(const Env& env, const std::string& job_id) {
  auto text = scontrol_show_job(env, job_id, JobDetail::summary);
  if (!text) return std::nullopt;
  auto at = text->find("EndTime=");
  if (at == std::string::npos) return std::nullopt;
  std::tm tm{};
  // "EndTime=2026-11-21T06:00:00" in the controller's local time; "Unknown" when unlimited.
  if (!strptime(text->c_str() + at + 8, "%Y-%m-%dT%H:%M:%S", &tm)) return std::nullopt;
  tm.tm_isdst = -1;
  std::time_t t = mktime(&tm);
  if (t <= 0) return std::nullopt;
  return static_cast<std::int64_t>(t);
}

std::optional<int> program_error(const Env& env, const std::string& program) {
  if (program.empty()) return ENOENT;  // as a shell says for '': not found, 127
  int err = ENOENT;
  for (const auto& p : proc::program_candidates(program, env)) {
    struct stat st {};
    if (stat(p.c_str(), &st) != 0) continue;
    if (S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0) return std::nullopt;
    err = EACCES;
  }
  return err;
}

std::error_code make_private_dirs(const std::string& path) {
  std::filesystem::path p;
  for (const auto& part : std::filesystem::path(path)) {
    p /= part;
    if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST) return {errno, std::generic_category()};
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec) && !ec)
    ec = std::make_error_code(std::errc::not_a_directory);
  return ec;
}

std::string working_folder_hint(const std::string& program) {
  struct stat st {};
  if (program.empty() || program.find('/') != std::string::npos ||
      stat(program.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return "";
  std::vector<std::string> ways;
  if (access(program.c_str(), X_OK) == 0) ways.push_back("./" + program);
  auto ends_with = [&](const std::string& x) {
    return program.size() > x.size() &&
           program.compare(program.size() - x.size(), x.size(), x) == 0;
  };
  if (ends_with(".py")) ways.push_back("python3 " + program);
  if (ends_with(".sh")) ways.push_back("bash " + program);
  std::string how = ways.empty() ? fmt::format("chmod +x {0}, then ./{0}", program) : ways[0];
  if (ways.size() > 1) how += " or " + ways[1];
  return fmt::format("{} is in the working folder: run {}", program, how);
}

DetectInput detect_input(const Env& env) {
  DetectInput in;
  in.env = env;
  in.read_file = [](const std::string& p) { return read_input_file(p); };
  in.hostname = common::hostname();
  in.cpu_count = cpu_count();
  in.slurm_job_details = [env](const std::string& id) {
    return scontrol_show_job(env, id, JobDetail::per_node);
  };
  // Only the bare machine without CUDA_VISIBLE_DEVICES needs the device count.
  if (!env.count("CUDA_VISIBLE_DEVICES")) in.device_gpu_count = gpu_count(env);
  return in;
}

std::string self_exe() {
  std::array<char, 4096> buf{};
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "gpurun";
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

std::string current_dir() {
  std::array<char, 4096> buf{};
  if (!getcwd(buf.data(), buf.size()))
    throw Error(fmt::format("cannot tell the working folder: {}", strerror(errno)));
  return buf.data();
}

}  // namespace gpurun::launcher::sys

// proc_util.h: POSIX plumbing shared by the supervisor and the wrapper: a self-pipe for
// signals, line-oriented socket reading, exec with an environment. Private.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "gpurun/launcher/allocation.h"

namespace gpurun::launcher::proc {

// Installs handlers that write the signal number to a pipe; returns its read end.
int install_signal_pipe(const std::vector<int>& signals);
// Reads pending signal numbers from the pipe.
std::vector<int> drain_signals(int fd);
void restore_default_signals(const std::vector<int>& signals);

// Reads what is available; appends complete lines to `lines`. Returns false on EOF/error.
bool read_lines(int fd, std::string& buf, std::vector<std::string>& lines);

// envp for execve built from a map.
std::vector<std::string> env_strings(const Env& env);
[[noreturn]] void exec_program(const std::vector<std::string>& argv, const Env& env);

double now_seconds();  // monotonic
std::string random_token();

}  // namespace gpurun::launcher::proc

// gpuq command-line front end: one function per subcommand. Each parses its own options (with
// --help), talks to the daemon and prints Slurm-shaped output; errors are thrown, and main() maps
// them to exit codes.
#pragma once

#include <string>
#include <vector>

namespace gpurun::queue {

using Args = std::vector<std::string>;  // the words after the subcommand

int cmd_submit(const Args& a);
int cmd_queue(const Args& a);
int cmd_cancel(const Args& a);
int cmd_show(const Args& a);
int cmd_log(const Args& a);
int cmd_history(const Args& a);
int cmd_hold(const Args& a, bool hold);
int cmd_drain(const Args& a, bool drain);
int cmd_daemon(const Args& a);

// GPUQ_SOCKET, else the system socket when it exists, else the per-user one.
std::string default_socket_path();

}  // namespace gpurun::queue

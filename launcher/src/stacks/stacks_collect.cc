// stacks_collect.cc: the wrapper's half of stacks.h: run eu-stack or gdb on every process of a
// hung rank, and hand Python ranks the faulthandler hook that prints their tracebacks.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "gpurun/common/posix.h"
#include "sys/proc_util.h"
#include "stacks/stacks.h"

namespace gpurun::launcher::stacks {
namespace {

// Live processes of group `pgid`, the leader first.
std::vector<pid_t> group_members(pid_t pgid) {
  std::vector<pid_t> out;
  for (const std::string& name : common::list_dir("/proc").value_or(std::vector<std::string>{})) {
    if (name[0] < '0' || name[0] > '9') continue;
    auto stat = common::read_file("/proc/" + name + "/stat");
    if (!stat) continue;
    auto close = stat->rfind(')');
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (close != std::string::npos &&
        sscanf(stat->c_str() + close + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3 &&
        pgrp == pgid && state != 'Z' && state != 'X')
      out.push_back(static_cast<pid_t>(std::atol(name.c_str())));
  }
  std::sort(out.begin(), out.end(),
            [pgid](pid_t a, pid_t b) { return (a == pgid) != (b == pgid) ? a == pgid : a < b; });
  return out;
}

std::string find_tool(const Env& env) {
  for (const char* name : {"eu-stack", "gdb"})
    for (const auto& p : proc::program_candidates(name, env)) {
      struct stat st {};
      if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0)
        return p;
    }
  return "";
}

// Runs argv with stdout and stderr into a pipe; its output, cut off at `deadline`.
std::string run_capture(const std::vector<std::string>& argv, const Env& env, double deadline) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return fmt::format("(pipe: {})\n", strerror(errno));
  common::Fd rd(p[0]), wr(p[1]);
  proc::Child c;
  try {
    int w = wr.get();
    c = proc::Child::spawn(argv, env, [w] {
      dup2(w, STDOUT_FILENO);
      dup2(w, STDERR_FILENO);
    });
  } catch (const std::exception& e) {
    return fmt::format("({})\n", e.what());
  }
  wr.reset();
  std::string out;
  char buf[65536];
  while (true) {
    int ms = static_cast<int>((deadline - proc::now_seconds()) * 1000);
    pollfd pf{rd.get(), POLLIN, 0};
    if (ms <= 0 || poll(&pf, 1, ms) <= 0) {
      out += fmt::format("({} did not finish in time: cut off)\n", argv[0]);
      break;  // the Child's owner kills and reaps it
    }
    ssize_t n = read(rd.get(), buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string comm(pid_t pid) {
  auto c = common::read_file(fmt::format("/proc/{}/comm", pid));
  std::string s = c.value_or("?");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

std::string python_shim() {
  return R"(# sitecustomize.py written by gpurun's rank wrapper: when gpurun finds the job hung it sends
# SIGURG, and faulthandler prints every thread's Python traceback to $GPURUN_PYSTACK_DIR without
# stopping the program. Then the sitecustomize this file shadows, if any, runs as usual.
import os, sys
def _gpurun_register():
    d = os.environ.get("GPURUN_PYSTACK_DIR")
    if not d:
        return None
    try:
        import faulthandler, signal
        f = open(os.path.join(d, "py-%d.txt" % os.getpid()), "w")
        faulthandler.register(signal.SIGURG, file=f, all_threads=True, chain=False)
        return f
    except Exception:
        return None
_gpurun_stack_file = _gpurun_register()
def _gpurun_chain():
    import importlib.machinery, importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        mod = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = mod
        spec.loader.exec_module(mod)
_gpurun_chain()
)";
}

std::vector<std::string> tool_command(const std::string& tool, pid_t pid) {
  std::string base = tool.substr(tool.find_last_of('/') + 1);
  if (base == "gdb")
    return {tool, "-p", std::to_string(pid), "-batch", "-nx", "-ex", "thread apply all bt"};
  return {tool, "-p", std::to_string(pid)};
}

std::string collect_stacks(const Env& env, pid_t pgid, const std::string& pystack_dir,
                           double timeout_s) {
  const double deadline = proc::now_seconds() + timeout_s;
  std::vector<pid_t> pids = group_members(pgid);
  if (pids.empty()) return "(no live process in the rank's process group)\n";
  killpg(pgid, kPythonSignal);  // Python ranks write their tracebacks meanwhile
  std::string tool = find_tool(env);
  std::string out;
  constexpr std::size_t kMaxProcesses = 16;
  for (std::size_t i = 0; i < pids.size() && i < kMaxProcesses; ++i) {
    out += fmt::format("=== process {} ({}) ===\n", pids[i], comm(pids[i]));
    if (tool.empty())
      out += "(neither eu-stack nor gdb is on PATH: install elfutils or gdb)\n";
    else
      out += run_capture(tool_command(tool, pids[i]), env, deadline);
  }
  if (pids.size() > kMaxProcesses)
    out += fmt::format("({} more processes not shown)\n", pids.size() - kMaxProcesses);
  for (pid_t p : pids) {
    auto py = common::read_file(fmt::format("{}/py-{}.txt", pystack_dir, p));
    if (py && !py->empty())
      out += fmt::format("=== python tracebacks of process {} ===\n{}", p, *py);
  }
  return out;
}

}  // namespace gpurun::launcher::stacks

// fuzz_allocation.cc: a coverage-guided (libFuzzer) target over gpurun's allocation readers, the
// input a broken or hostile environment controls: Slurm hostlists and tasks-per-node lists (and
// their compression, which must expand back to the same list), --env-file dumps, PBS node and GPU
// files, LSF host files and LSB_MCPU_HOSTS, each read through detect_allocation() and planned.
// The first byte picks the reader, the rest is its input. A reader may refuse its input with
// gpurun::launcher::Error (the one error channel); anything else (a crash, another exception, a
// sanitizer report, a round trip that differs) is a finding. Built and run by run_fuzz.sh.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "alloc/env_util.h"
#include "gpurun/launcher/allocation.h"
#include "gpurun/launcher/error.h"
#include "gpurun/launcher/hostlist.h"
#include "gpurun/launcher/plan.h"

using namespace gpurun::launcher;

namespace {

void check(bool ok) {
  if (!ok) std::abort();  // libFuzzer saves the input that got here
}

void hostlists(std::string_view in) {
  auto hosts = expand_hostlist(in);
  if (hosts.empty() || hosts.size() > 4096) return;
  try {
    check(expand_hostlist(compress_hostlist(hosts)) == hosts);
  } catch (const HostlistError&) {  // a host the syntax cannot write ('n[', blanks) is refused
  }
}

void tasks_per_node(std::string_view in) {
  auto counts = expand_tasks_per_node(in);
  if (counts.size() <= 4096) check(expand_tasks_per_node(compress_tasks_per_node(counts)) == counts);
}

// A job of `env` whose every file reads as `file`, planned with the defaults.
void allocation(Env env, const std::string& file) {
  DetectInput d;
  d.env = std::move(env);
  d.read_file = [file](const std::string&) -> std::optional<std::string> { return file; };
  d.hostname = "node1";
  d.cpu_count = 4;
  Allocation a = detect_allocation(d);
  check(!a.nodes.empty());
  RankPlan p = make_plan(a, PlanOptions{});
  check(p.world_size == static_cast<int>(p.ranks.size()) && p.world_size > 0);
}

void one(std::uint8_t mode, std::string_view in) {
  const std::string s(in);
  switch (mode % 7) {
    case 0:
      return hostlists(in);
    case 1:
      return tasks_per_node(in);
    case 2:
      return allocation(detail::parse_env_text(s, "fuzz"), "");
    case 3:
      return allocation({{"PBS_JOBID", "1.pbs"}, {"PBS_NODEFILE", "/nodefile"}}, s);
    case 4:
      return allocation({{"LSB_JOBID", "1"}, {"LSB_DJOB_HOSTFILE", "/hostfile"}}, s);
    case 5:
      return allocation({{"LSB_JOBID", "1"}, {"LSB_MCPU_HOSTS", s}}, "");
    default: {  // Slurm's two lists, split at the first newline
      const std::size_t nl = s.find('\n');
      return allocation({{"SLURM_JOB_ID", "1"},
                         {"SLURM_JOB_NODELIST", s.substr(0, nl)},
                         {"SLURM_TASKS_PER_NODE", nl == std::string::npos ? "1" : s.substr(nl + 1)}},
                        "");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  try {
    one(data[0], std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  } catch (const Error&) {  // refused with a message: what a reader should do
  }
  return 0;
}

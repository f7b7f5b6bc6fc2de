// cpubind.h: --cpu-bind auto|none|LIST: which CPUs each rank of a node runs on.
//
// auto: a rank's CPUs are the node's allowed CPUs that are local to its GPU (hwloc: the CPUs of
// the package or NUMA node its PCI device hangs under), split in whole cores between the ranks
// whose GPUs share that set; ranks without a GPU split the allowed CPUs. LIST: one Linux cpulist
// per local rank, separated by ':' ("0-11,48-59:12-23,60-71"). OMP_NUM_THREADS follows the binding.
//
// Detection is a pure function of an injected Topology (topology.h: hwloc, from the machine or an
// XML file) and an injected file tree (Tree) for the driver's GPU list, so a two-socket 8-GPU node
// is a test fixture; the wrapper passes the machine's own. Private.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sys/topology.h"

namespace gpurun::launcher::cpubind {

struct Tree {
  std::function<std::optional<std::string>(const std::string& path)> read;
  std::function<std::vector<std::string>(const std::string& dir)> list;  // entry names
};
// The machine's own files (only /proc/driver/nvidia is read).
Tree real_tree();

// The CPUs this process may run on (its affinity mask, which the kernel keeps inside its
// cgroup's set), ascending; empty when it cannot be read.
std::vector<int> allowed_cpus();

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}; parse throws Error naming `what`.
std::vector<int> parse_cpulist(std::string_view text, const std::string& what);
std::string format_cpulist(const std::vector<int>& cpus);

// The PCI address ("0000:3b:00.0") of the GPU that CUDA (CUDA_DEVICE_ORDER=PCI_BUS_ID) calls
// `id`: an index, or a GPU- UUID; from /proc/driver/nvidia/gpus/*/information. nullopt when
// unknown (no driver, a MIG- UUID).
std::optional<std::string> gpu_pci_address(const Tree& t, const std::string& id);

// Each local rank's CPUs under auto. `gpus[i]`: local rank i's first GPU id as CUDA names it, or
// nullopt; `allowed`: the CPUs this node lets the job use.
std::vector<std::vector<int>> auto_binding(const Tree& t, const Topology& topo,
                                           const std::vector<int>& allowed,
                                           const std::vector<std::optional<std::string>>& gpus);

// Each local rank's CPUs under --cpu-bind `spec` (none: empty lists, i.e. no binding); checks
// LIST against `allowed` and the number of local ranks, naming `host` in its errors. `topo` may be
// null (hwloc could not read the node): auto then binds nothing, as none does.
std::vector<std::vector<int>> binding(const std::string& spec, const Tree& t, const Topology* topo,
                                      const std::vector<int>& allowed,
                                      const std::vector<std::optional<std::string>>& gpus,
                                      const std::string& host);

// Throws Error unless `spec` is none, auto or a ':'-separated list of cpulists.
void check_spec(const std::string& spec);

}  // namespace gpurun::launcher::cpubind

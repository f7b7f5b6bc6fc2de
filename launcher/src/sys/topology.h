// topology.h: the node's topology as hwloc sees it: which CPUs share a core, and which CPUs are
// local to a PCI device (its nearest non-I/O ancestor: the package or NUMA node it hangs under).
//
// Loaded from the machine itself, or from an hwloc XML file (what `lstopo node.xml` writes), so a
// two-socket 8-GPU node is a test fixture (tests/launcher/fixtures/topology/). GPU runtimes are
// kept out of the discovery (hwloc's cuda, nvml, opencl, ... components): a rank's wrapper must
// not start one before it execs the program. Private.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

struct hwloc_topology;

namespace gpurun::launcher::cpubind {

class Topology {
 public:
  // This machine's topology; throws Error when hwloc cannot read it.
  static Topology of_machine();
  // The topology in the hwloc XML file `path`; throws Error naming the file.
  static Topology from_xml(const std::string& path);

  // The lowest CPU of `cpu`'s core (`cpu` when hwloc knows no core for it), so that hyperthread
  // siblings stay together.
  int core_of(int cpu) const;
  // The CPUs local to the PCI device at `bus_id` ("0000:3b:00.0"); nullopt when the topology has
  // no such device.
  std::optional<std::vector<int>> pci_local_cpus(const std::string& bus_id) const;

 private:
  struct Close {
    void operator()(hwloc_topology* t) const;
  };
  explicit Topology(std::unique_ptr<hwloc_topology, Close> t) : t_(std::move(t)) {}
  static Topology load(const std::string& xml);  // "": this machine
  std::unique_ptr<hwloc_topology, Close> t_;
};

}  // namespace gpurun::launcher::cpubind

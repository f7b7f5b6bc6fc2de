// topology.cc: see topology.h.
#include "sys/topology.h"

#include <fmt/format.h>
#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>

#include "gpurun/launcher/error.h"

namespace gpurun::launcher::cpubind {
namespace {

// Cores and PUs come always; of the I/O tree keep the devices worth locating (GPUs, NICs,
// storage) and the bridges above them, and no OS devices (hwloc would ask CUDA, NVML or OpenCL
// for them, starting a GPU runtime in the wrapper). Blacklisting a component this hwloc lacks
// fails harmlessly, hence no check.
void configure(hwloc_topology_t t) {
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE);
  for (const char* c : {"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"})
    hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, c);
}

std::vector<int> cpus_of(hwloc_const_cpuset_t set) {
  std::vector<int> out;
  for (int c = hwloc_bitmap_first(set); c != -1; c = hwloc_bitmap_next(set, c)) out.push_back(c);
  return out;
}

}  // namespace

void Topology::Close::operator()(hwloc_topology* t) const {
  hwloc_topology_destroy(t);
}

Topology Topology::load(const std::string& xml) {
  hwloc_topology_t raw = nullptr;
  std::string what = xml.empty() ? "this machine's topology" : "the topology in " + xml;
  auto fail = [&] { return Error(fmt::format("hwloc cannot read {}: {}", what, strerror(errno))); };
  if (hwloc_topology_init(&raw) != 0) throw fail();
  Topology t(std::unique_ptr<hwloc_topology, Close>{raw});
  configure(raw);
  // set_xml parses the file at once; on failure hwloc would go on to read this machine instead.
  if (!xml.empty() && hwloc_topology_set_xml(raw, xml.c_str()) != 0) throw fail();
  if (hwloc_topology_load(raw) != 0) throw fail();
  return t;
}

Topology Topology::of_machine() {
  return load("");
}

Topology Topology::from_xml(const std::string& path) {
  return load(path);
}

int Topology::core_of(int cpu) const {
  hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(t_.get(), static_cast<unsigned>(cpu));
  hwloc_obj_t core = pu ? hwloc_get_ancestor_obj_by_type(t_.get(), HWLOC_OBJ_CORE, pu) : nullptr;
  return core ? hwloc_bitmap_first(core->cpuset) : cpu;
}

std::optional<std::vector<int>> Topology::pci_local_cpus(const std::string& bus_id) const {
  hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(t_.get(), bus_id.c_str());
  if (!dev) return std::nullopt;
  return cpus_of(hwloc_get_non_io_ancestor_obj(t_.get(), dev)->cpuset);
}

}  // namespace gpurun::launcher::cpubind

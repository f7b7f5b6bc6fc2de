// cpubind_test.cc: --cpu-bind (launcher/src/sys/cpubind.h, topology.h) on a fixture of a
// two-socket 8-GPU node: hwloc loads fixtures/topology/two_socket_8_gpu.xml (2 x 24 cores with 2
// hyperthreads each, CPUs 0-47 and their siblings 48-95; GPUs 0-3 under socket 0, 0-23,48-71, and
// 4-7 under socket 1, 24-47,72-95), and /proc/driver/nvidia lists the GPUs as on such a node.
// Also hwloc on this machine itself, checked against what sysfs says.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "gpurun/common/posix.h"
#include "gpurun/launcher/error.h"
#include "sys/cpubind.h"
#include "sys/topology.h"

namespace gpurun::launcher::cpubind {
namespace {

const char* kBus[8] = {"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0",
                       "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"};

// The driver's view of the node: its GPUs, by PCI address, with their UUIDs.
Tree two_socket_8_gpu() {
  auto files = std::make_shared<std::map<std::string, std::string>>();
  for (int g = 0; g < 8; ++g)
    (*files)[std::string("/proc/driver/nvidia/gpus/") + kBus[g] + "/information"] =
        "Model: \t\t NVIDIA A100-SXM4-80GB\nIRQ:   \t\t 0\nGPU UUID: \t GPU-0000000" +
        std::to_string(g) + "-aaaa-bbbb-cccc-dddddddddddd\nBus Location: \t " + kBus[g] + "\n";
  Tree t;
  t.read = [files](const std::string& p) -> std::optional<std::string> {
    auto it = files->find(p);
    if (it == files->end()) return std::nullopt;
    return it->second;
  };
  t.list = [](const std::string& dir) {
    std::vector<std::string> out;
    // Unsorted on purpose: the driver lists them in no promised order.
    if (dir == "/proc/driver/nvidia/gpus")
      for (int g : {5, 0, 7, 2, 1, 6, 3, 4}) out.push_back(kBus[g]);
    return out;
  };
  return t;
}

// hwloc's view of the same node.
Topology two_socket_8_gpu_topology() {
  return Topology::from_xml(std::string(GPURUN_FIXTURES) + "/topology/two_socket_8_gpu.xml");
}

std::vector<int> all_cpus() {
  return parse_cpulist("0-95", "test");
}

std::vector<std::optional<std::string>> gpu_ids(std::vector<std::string> ids) {
  return {ids.begin(), ids.end()};
}

TEST(CpuList, ParsesAndFormats) {
  EXPECT_EQ(parse_cpulist("0-3,8,10-11\n", "x"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(format_cpulist({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  for (const char* bad : {"3-1", "a", "1,,2", "-1", "1-", "0-9999999"})
    EXPECT_THROW(parse_cpulist(bad, "x"), Error) << bad;
}

TEST(GpuAddress, IndexInPciOrderOrUuid) {
  Tree t = two_socket_8_gpu();
  EXPECT_EQ(gpu_pci_address(t, "0").value_or(""), "0000:07:00.0");
  EXPECT_EQ(gpu_pci_address(t, "5").value_or(""), "0000:90:00.0");
  EXPECT_EQ(gpu_pci_address(t, "GPU-00000006-aaaa-bbbb-cccc-dddddddddddd").value_or(""),
            "0000:b7:00.0");
  EXPECT_FALSE(gpu_pci_address(t, "8").has_value());
  EXPECT_FALSE(gpu_pci_address(t, "MIG-1234").has_value());
}

TEST(AutoBinding, OneRankPerGpuSplitsEachSocketInWholeCores) {
  auto b = auto_binding(two_socket_8_gpu(), two_socket_8_gpu_topology(), all_cpus(),
                        gpu_ids({"0", "1", "2", "3", "4", "5", "6", "7"}));
  ASSERT_EQ(b.size(), 8u);
  EXPECT_EQ(format_cpulist(b[0]), "0-5,48-53");
  EXPECT_EQ(format_cpulist(b[3]), "18-23,66-71");
  EXPECT_EQ(format_cpulist(b[4]), "24-29,72-77");
  EXPECT_EQ(format_cpulist(b[7]), "42-47,90-95");
}

TEST(AutoBinding, RanksOnTwoGpusOfDifferentSocketsGetTheirWholeSocket) {
  auto b = auto_binding(two_socket_8_gpu(), two_socket_8_gpu_topology(), all_cpus(),
                        gpu_ids({"1", "GPU-00000004-aaaa-bbbb-cccc-dddddddddddd"}));
  EXPECT_EQ(format_cpulist(b[0]), "0-23,48-71");
  EXPECT_EQ(format_cpulist(b[1]), "24-47,72-95");
}

TEST(AutoBinding, RanksFollowTheirGpusSocketNotTheirOrder) {
  // Split in rank order alone, the three would get thirds of the node; by locality, the two ranks
  // on socket 1's GPUs halve socket 1 and the rank on GPU 0 has socket 0 to itself.
  auto b = auto_binding(two_socket_8_gpu(), two_socket_8_gpu_topology(), all_cpus(),
                        gpu_ids({"4", "5", "0"}));
  EXPECT_EQ(format_cpulist(b[0]), "24-35,72-83");
  EXPECT_EQ(format_cpulist(b[1]), "36-47,84-95");
  EXPECT_EQ(format_cpulist(b[2]), "0-23,48-71");
}

TEST(AutoBinding, TwoRanksPerGpuShareItsSocket) {
  std::vector<std::string> ids;
  for (int g = 0; g < 8; ++g) ids.insert(ids.end(), 2, std::to_string(g));
  auto b = auto_binding(two_socket_8_gpu(), two_socket_8_gpu_topology(), all_cpus(), gpu_ids(ids));
  EXPECT_EQ(format_cpulist(b[0]), "0-2,48-50");
  EXPECT_EQ(format_cpulist(b[1]), "3-5,51-53");
  EXPECT_EQ(format_cpulist(b[15]), "45-47,93-95");
}

TEST(AutoBinding, OnlyAllowedCpusAndOtherwiseWhatIsAllowed) {
  // A job whose cgroup allows 12 cores of socket 0 (and their siblings) only.
  auto allowed = parse_cpulist("0-11,48-59", "test");
  auto b = auto_binding(two_socket_8_gpu(), two_socket_8_gpu_topology(), allowed,
                        gpu_ids({"0", "1", "4"}));
  // Rank 2's GPU is on socket 1, none of whose CPUs are allowed: it draws from what is allowed,
  // which is what ranks 0 and 1 draw from too, so the three split it without overlap.
  EXPECT_EQ(format_cpulist(b[0]), "0-3,48-51");
  EXPECT_EQ(format_cpulist(b[1]), "4-7,52-55");
  EXPECT_EQ(format_cpulist(b[2]), "8-11,56-59");
  auto two =
      auto_binding(two_socket_8_gpu(), two_socket_8_gpu_topology(), allowed, gpu_ids({"0", "1"}));
  EXPECT_EQ(format_cpulist(two[0]), "0-5,48-53");
  EXPECT_EQ(format_cpulist(two[1]), "6-11,54-59");
}

TEST(AutoBinding, RanksWithoutGpusSplitTheAllowedCpus) {
  auto b = auto_binding(two_socket_8_gpu(), two_socket_8_gpu_topology(), parse_cpulist("0-3", "t"),
                        {std::nullopt, std::nullopt});
  EXPECT_EQ(format_cpulist(b[0]), "0-1");
  EXPECT_EQ(format_cpulist(b[1]), "2-3");
  auto few = auto_binding(two_socket_8_gpu(), two_socket_8_gpu_topology(), parse_cpulist("0", "t"),
                          {std::nullopt, std::nullopt});
  EXPECT_EQ(format_cpulist(few[1]), "0") << "more ranks than CPUs share them";
}

TEST(Binding, ListsAreCheckedAgainstTheNode) {
  Tree t = two_socket_8_gpu();
  auto b = binding("0-3:4-7", t, nullptr, all_cpus(), {std::nullopt, std::nullopt}, "n1");
  EXPECT_EQ(format_cpulist(b[1]), "4-7");
  EXPECT_TRUE(binding("none", t, nullptr, all_cpus(), {std::nullopt}, "n1")[0].empty());
  try {
    binding("0-3", t, nullptr, all_cpus(), {std::nullopt, std::nullopt}, "n1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n1 runs 2 ranks"), std::string::npos) << e.what();
  }
  try {
    binding("0:200", t, nullptr, all_cpus(), {std::nullopt, std::nullopt}, "n1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU 200"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_spec("0-3::4"), Error);
  EXPECT_THROW(check_spec("sometimes"), Error);
  EXPECT_NO_THROW(check_spec("auto"));
}

TEST(Binding, AutoWithoutATopologyBindsNothing) {
  Tree t = two_socket_8_gpu();
  Topology topo = two_socket_8_gpu_topology();
  EXPECT_EQ(format_cpulist(binding("auto", t, &topo, all_cpus(), gpu_ids({"4"}), "n1")[0]),
            "24-47,72-95");
  EXPECT_TRUE(binding("auto", t, nullptr, all_cpus(), gpu_ids({"4"}), "n1")[0].empty())
      << "hwloc could not read the node: the rank runs unbound";
}

TEST(Topology, FixtureHasItsCoresAndGpus) {
  Topology topo = two_socket_8_gpu_topology();
  EXPECT_EQ(topo.core_of(50), 2) << "CPU 50 is CPU 2's hyperthread sibling";
  EXPECT_EQ(topo.core_of(2), 2);
  EXPECT_EQ(topo.core_of(500), 500) << "a CPU hwloc does not know is its own core";
  EXPECT_EQ(format_cpulist(topo.pci_local_cpus("0000:07:00.0").value_or(std::vector<int>{})),
            "0-23,48-71");
  EXPECT_EQ(format_cpulist(topo.pci_local_cpus("0000:BD:00.0").value_or(std::vector<int>{})),
            "24-47,72-95")
      << "bus ids compare as numbers";
  EXPECT_FALSE(topo.pci_local_cpus("0000:08:00.0").has_value());
}

TEST(Topology, AnUnreadableXmlFileIsAnErrorNamingIt) {
  for (std::string path : {std::string("/nonexistent/node.xml"),
                           std::string(GPURUN_FIXTURES) + "/topology/make_fixtures.py"}) {
    try {
      Topology::from_xml(path);
      FAIL() << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("hwloc cannot read the topology in " + path),
                std::string::npos)
          << e.what();
    }
  }
}

// This machine through hwloc: each PCI device hwloc keeps is local to the CPUs sysfs names for it
// (less those outside this process's cgroup), and two ranks without GPUs split our CPUs.
TEST(Topology, ThisMachineAgreesWithSysfs) {
  Topology topo = Topology::of_machine();
  std::vector<int> mine = allowed_cpus();
  ASSERT_FALSE(mine.empty());
  for (int c : mine) EXPECT_LE(topo.core_of(c), c);
  int seen = 0;
  for (const auto& dev : real_tree().list("/sys/bus/pci/devices")) {
    auto cpus = topo.pci_local_cpus(dev);
    auto text = common::read_file("/sys/bus/pci/devices/" + dev + "/local_cpulist");
    if (!cpus || !text) continue;
    ++seen;
    auto sysfs = parse_cpulist(*text, dev);
    for (int c : *cpus) EXPECT_TRUE(std::binary_search(sysfs.begin(), sysfs.end(), c)) << dev;
    for (int c : mine)
      EXPECT_EQ(std::binary_search(cpus->begin(), cpus->end(), c),
                std::binary_search(sysfs.begin(), sysfs.end(), c))
          << dev << " CPU " << c;
  }
  std::cout << "hwloc located " << seen << " PCI device(s) of this machine\n";
  auto b = auto_binding(real_tree(), topo, mine, {std::nullopt, std::nullopt});
  ASSERT_EQ(b.size(), 2u);
  EXPECT_FALSE(b[0].empty());
  if (mine.size() >= 2) {
    std::vector<int> both;
    std::set_intersection(b[0].begin(), b[0].end(), b[1].begin(), b[1].end(),
                          std::back_inserter(both));
    EXPECT_TRUE(both.empty()) << format_cpulist(b[0]) << " and " << format_cpulist(b[1]);
  }
}

}  // namespace
}  // namespace gpurun::launcher::cpubind

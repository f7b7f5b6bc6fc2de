// test_support.h: fixture loading for launcher tests. Fixture files name the scheduler's own
// paths (PBS_NODEFILE=/var/spool/pbs/aux/...): the injected file reader maps them to the sidecar
// files in tests/launcher/data, so detection reads them exactly as it would on a cluster.
#pragma once

#include <map>
#include <string>

#include "gpurun/common/posix.h"
#include "gpurun/launcher/allocation.h"
#include "sys/system.h"

namespace gpurun::launcher::fixtures {

inline std::string data(const std::string& name) {
  return std::string(GPURUN_TEST_DATA) + "/" + name;
}

inline DetectInput fixture(const std::string& env_file,
                           std::map<std::string, std::string> files = {}) {
  DetectInput in;
  in.env = sys::read_env_file(data(env_file));
  for (auto& [k, v] : in.env) {
    auto at = v.find("@DATA@");
    if (at != std::string::npos) v.replace(at, 6, GPURUN_TEST_DATA);
  }
  files.emplace("/var/spool/pbs/aux/4242.pbs01", data("pbspro.nodefile"));
  files.emplace("/home/alice/.lsbatch/1767225600.314159.hostfile", data("lsf.djob_hostfile"));
  in.read_file = [files](const std::string& p) {
    auto it = files.find(p);
    return common::read_file(it == files.end() ? p : it->second);
  };
  in.hostname = "testhost";
  in.cpu_count = 8;
  return in;
}

}  // namespace gpurun::launcher::fixtures

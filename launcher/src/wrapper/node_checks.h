// node_checks.h: --preflight on one node, in its local rank 0's wrapper, before any program of the
// job starts (control::Rendezvous asks, control::Preflight answers): the GPUs the plan gave the
// node are there and healthy (gpu_health.h: no uncorrected ECC error since the driver loaded, no
// page retirement or row remap pending, no failed remap, none fallen off the bus), TMPDIR has
// room, and (--preflight-bandwidth) how fast the link to rank 0's node moves a few MB. What is
// wrong is a failure; what cannot be checked (no NVML and no nvidia-smi) is a note: gpurun warns
// and goes on. The decisions are pure functions, unit-tested in tests/launcher/preflight_test.cc.
// Private to the gpurun binary.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpurun/gpuinfo/gpu_health.h"
#include "monitor/monitor.h"
#include "sys/net.h"

namespace gpurun::launcher::node_checks {

struct Result {
  std::vector<std::string> failures, notes;
  double mb_per_s = -1;  // --preflight-bandwidth's figure; -1: not measured
};

// What is wrong with the job's GPUs on this node (`job`: monitor::job_gpus of the ranks that
// were given GPUs here) according to `health`: GPUs of the job the driver does not list (by index
// or UUID, with the renumbering inside a device cgroup that monitor::keep_job_gpus undoes), GPUs
// the driver cannot read, and each job GPU's health faults, named with its rank. A GPU the job
// was not given counts only when the driver cannot read it (a GPU fallen off the bus takes the
// driver's state with it). MIG devices (MIG-... UUIDs) are not matched one by one: a job of MIG
// devices only has every GPU of the node checked.
std::vector<std::string> gpu_failures(const gpuinfo::HealthReport& health,
                                      const monitor::JobGpus& job);

// `dir` with `free_bytes` free (nullopt: statvfs failed, `why`), against `min_bytes` (0: no
// check): the failure, or nullopt.
std::optional<std::string> tmp_failure(const std::string& dir,
                                       std::optional<std::uint64_t> free_bytes,
                                       std::uint64_t min_bytes, const std::string& why = "");

// The node's checks: the GPU health query when any rank here was given a GPU (cfg: the sampler's
// nvidia-smi choice), and TMPDIR's free space (statvfs).
Result check_node(const gpuinfo::SamplerConfig& cfg, const monitor::JobGpus& job, bool any_gpu,
                  const std::string& tmp_dir, std::uint64_t min_tmp);

// --preflight-bandwidth: an echo exchange. Rank 0's wrapper serves, one connection at a time so
// each link is timed alone, from a thread it stops (and joins) before its program starts; every
// other node's local rank 0 sends kBandwidthBytes and times until all of them came back: what a
// two-node allreduce moves on that link. TCP on the rendezvous network, not NCCL's transport.
inline constexpr std::int64_t kBandwidthBytes = 8 << 20;
class BandwidthServer {
 public:
  // Listens on an ephemeral port of every address; throws Error when it cannot.
  BandwidthServer();
  ~BandwidthServer();
  BandwidthServer(const BandwidthServer&) = delete;
  BandwidthServer& operator=(const BandwidthServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// MB/s (10^6 bytes) of `bytes` sent to host:port and echoed back, within `timeout_s` all told
// (its turn at the server included); throws Error saying what failed.
double measure_bandwidth(const std::string& host, int port, std::int64_t bytes, double timeout_s);

}  // namespace gpurun::launcher::node_checks

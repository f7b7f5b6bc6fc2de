// monitor.h: `gpurun --monitor[=SECONDS] FILE.csv`. On every node, the wrapper of local rank 0
// samples the node's GPUs in a thread of its own (NodeSampler: gpu_sampler.h's GpuSampler, so
// NVML or nvidia-smi, which can take seconds) and sends each sample over the control socket
// (control::GpuSamples). The supervisor writes them into one CSV (MonitorLog) and, at the end,
// prints one line per node and names the GPUs whose mean utilisation is under half the job's
// median as likely stragglers. Private to the gpurun binary.
#pragma once

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control/control.h"
#include "gpurun/common/periodic.h"
#include "gpurun/common/posix.h"
#include "gpurun/launcher/error.h"
#include "gpurun/gpuinfo/gpu_sampler.h"
#include "gpurun/launcher/plan.h"

namespace gpurun::launcher::monitor {

// The job's GPUs on one node, as CUDA names them (CUDA_VISIBLE_DEVICES: indices or UUIDs), each
// with the rank it was given to (-1: none), and the node's whole list they were taken from.
// Empty: the job has no GPU list on this node, and every GPU of the node is sampled, owned by no
// rank.
struct JobGpus {
  std::vector<std::string> ids;
  std::vector<int> owner;
  std::vector<std::string> visible;
};
// From the plan: the GPUs of the ranks on `node_rank`, positions into `visible` (the node's list);
// when no rank there has a GPU, all of `visible`, owned by none.
JobGpus job_gpus(const RankPlan& plan, int node_rank, const std::vector<std::string>& visible);

// Keeps the GPUs of `s` that are the job's (an index names a whole GPU, a UUID a GPU or a MIG
// device) and returns their owners in the order kept. Every GPU when `job.ids` is empty. A GPU of
// the job that `s` does not list is named in s.problems.
//
// Where the sampler runs inside the job's device cgroup (Slurm's ConstrainDevices), the driver
// lists only the job's GPUs, numbered from 0 in PCI order, while the node's list may hold the
// node's own numbers (SLURM_JOB_GPUS when CUDA_VISIBLE_DEVICES is unset). When `s` lists exactly
// as many GPUs as `job.visible` holds indices, numbered 0..n-1, not all of those indices are
// among them, and the driver lost none (s.problems empty), the k-th smallest index of the list is
// the sampled GPU k; the kept sample then carries the node's number.
std::vector<int> keep_job_gpus(gpuinfo::GpuSnapshot& s, const JobGpus& job);

// Samples now, then every interval, in a thread (common::PeriodicThread); the event loop polls
// fd() and reports what take() returns. The first failure is reported once (GpuSamplesFailed);
// when no sample ever succeeded (no NVML, no nvidia-smi) sampling stops there, and the job goes
// on. Throws std::runtime_error when the thread's eventfd cannot be made.
class NodeSampler {
 public:
  NodeSampler(gpuinfo::SamplerConfig cfg, int interval_ms, JobGpus job);
  NodeSampler(const NodeSampler&) = delete;
  NodeSampler& operator=(const NodeSampler&) = delete;

  int fd() const { return thread_.fd(); }  // readable while messages wait
  std::vector<control::ToSupervisor> take();
  void stop() { thread_.stop(); }  // no sample after the one under way; join

 private:
  bool tick();  // one run of the thread; false ends it
  bool sample_once(gpuinfo::GpuSampler& sampler);
  void push(control::ToSupervisor m);

  const JobGpus job_;
  // The thread's own: the sampler is made in it, from cfg_, on its first run.
  gpuinfo::SamplerConfig cfg_;
  std::optional<gpuinfo::GpuSampler> sampler_;
  bool ever_ok_ = false, failed_once_ = false;
  std::mutex mu_;  // guards out_
  std::deque<control::ToSupervisor> out_;
  common::PeriodicThread thread_;  // last: starts once everything it touches exists
};

// Figures of one GPU over the job.
struct GpuStats {
  std::string node;
  int index = -1, mig = -1;
  int rank = -1;
  int samples = 0, util_n = 0, mem_n = 0;
  double util_sum = 0, util_max = 0, mem_sum = 0;
};
// One line per node ("node1: GPU 0 (rank 0) util mean 17% max 20%, mem mean 1024 MiB; ..."),
// nodes in `node_order` (the plan's), any other after them as first seen, then one line per likely
// straggler: a GPU whose mean utilisation is under half the median of every GPU's mean (at least
// two GPUs with utilisation needed).
std::vector<std::string> summarize(const std::vector<GpuStats>& gpus,
                                   const std::vector<std::string>& node_order = {});

// The supervisor's side: FILE.csv and the figures for the summary. Rows are appended to the file
// as they come, each sample's rows in one write(2) and unbuffered, so the file can be followed
// while the job runs and a gpurun that is killed leaves whole rows (a reader may drop a last line
// without its newline, which only a kill in the middle of that one write could leave).
class MonitorLog {
 public:
  static constexpr const char* kHeader = "time,node,rank,gpu,util,mem_used_mib,power_w,temp_c";
  // Creates (or empties) `path` and writes the header; throws Error naming --monitor and the path.
  explicit MonitorLog(const std::string& path);
  // What the constructor would throw for `path`, found without creating or emptying it
  // (--dry-run): a missing or unwritable directory, a directory, a file that cannot be written.
  static void check(const std::string& path);
  // One GpuSamples from the wrapper on `node`; returns what the sample says could not be read
  // (a GPU lost, a GPU of the job not listed: GpuSnapshot::problems). Throws Error when the
  // sample does not parse.
  std::vector<std::string> add(const std::string& node, const control::GpuSamples& m);
  std::vector<std::string> summary(const std::vector<std::string>& node_order) const {
    return summarize(gpus_, node_order);
  }
  const std::string& path() const { return path_; }
  int rows() const { return rows_; }

 private:
  std::string path_;
  common::Fd fd_;
  std::vector<GpuStats> gpus_;
  int rows_ = 0;
};

}  // namespace gpurun::launcher::monitor

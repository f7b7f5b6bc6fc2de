// plan.h: turns an allocation and the user's options into a rank table (rank, node rank, local
// rank, host, GPU positions), the rendezvous address and port. Pure: no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gpurun/launcher/allocation.h"

namespace gpurun::launcher {

enum class NprocMode { automatic, count, gpu };

// --contract: which frameworks' rendezvous variables every rank gets (rank_environment()). The
// rank numbers RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK come with every set: JAX
// reads no variable for its process count or id, and TF_CONFIG users still log by rank.
struct Contracts {
  bool torch = true;  // GROUP_RANK MASTER_ADDR MASTER_PORT (torchrun's env://)
  bool tf = true;     // TF_CONFIG (TensorFlow's multi-worker strategies)
  bool jax = true;    // JAX_COORDINATOR_ADDRESS JAX_LOCAL_DEVICE_IDS (jax.distributed)
};

// Parses --contract: a comma-separated list of torch, tf and jax (each at most once).
Contracts parse_contracts(const std::string& value);
// "torch,tf,jax" (those set, in that order); "" when none is.
std::string to_string(const Contracts& c);

// --nnodes MIN:MAX: the job runs on at most MAX of the allocation's nodes (the first MAX, in its
// order), and goes on while at least MIN of them are healthy (nodes that fail their preflight,
// or die mid-run, are left out of the next attempt: supervisor/node_loss.h).
struct NodeRange {
  int min = 1;
  int max = 1;
};

// Parses --nnodes: "N" (N:N) or "MIN:MAX", 1 <= MIN <= MAX. Throws Error saying what is wrong.
NodeRange parse_nnodes(const std::string& text);

struct PlanOptions {
  std::optional<int> ntasks;                    // -n: total ranks
  std::optional<NodeRange> nnodes;              // --nnodes
  NprocMode nproc_mode = NprocMode::automatic;  // --nproc-per-node auto|gpu|N
  int nproc_per_node = 0;                       // N when nproc_mode == count
  std::optional<int> gpus_per_rank;             // --gpus-per-rank
  std::optional<int> master_port;               // --master-port
  std::optional<int> cpus_per_rank;             // --cpus-per-rank
  Contracts contracts;                          // --contract
  // --contract was given: a TF_CONFIG too long for the environment is then an error; by
  // default tf is left out of such a plan, with a note.
  bool contracts_given = false;
};

// Parses "auto", "gpu" or a positive count for --nproc-per-node.
void parse_nproc_per_node(const std::string& value, PlanOptions& opts);

struct RankEntry {
  int rank = 0;
  int node_rank = 0;
  int local_rank = 0;
  int local_world_size = 1;
  std::string host;
  std::vector<int> gpus;  // positions in the node's visible GPU list
};

struct PlanNode {
  std::string host;
  int ranks = 0;
  int gpus = 0;  // GPUs the allocation has on the node
  int first_rank = 0;
  std::vector<std::string> gpu_ids = {};  // NodeAlloc::gpu_ids
};

struct RankPlan {
  int world_size = 0;
  std::vector<RankEntry> ranks;
  std::vector<PlanNode> nodes;  // the nodes that run ranks, in rank order
  std::string master_addr;
  int master_port = 0;
  int cpus_per_rank = 1;
  Contracts contracts;
  // Whether gpurun's own stdout is a terminal. Engines give ranks a pty or a pipe regardless
  // (Open MPI uses a pty), so ranks learn it from GPURUN_STDOUT_TTY, e.g. to draw progress bars.
  bool stdout_tty = false;
  std::vector<std::string> notes;
};

// With --nnodes, the allocation must have at least MIN nodes, and the plan takes its first MAX.
RankPlan make_plan(const Allocation& alloc, const PlanOptions& opts);

// The rendezvous port for a job: a hash of the job id over [15000, 32000), below Linux's
// ephemeral range so outgoing connections never hold it. The launcher checks it is free and
// moves to the next one if not.
int derive_master_port(const std::string& job_key);

// TF_CONFIG's port for a worker of local rank `local_rank`: MASTER_PORT + 1 + local rank, so the
// workers of one host never share a port and none takes MASTER_PORT (JAX's coordinator's, and
// torch's). Derived, not held: only MASTER_PORT is held by rank 0's wrapper.
int tf_worker_port(int master_port, int local_rank);

}  // namespace gpurun::launcher

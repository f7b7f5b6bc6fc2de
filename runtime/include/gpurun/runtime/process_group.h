// process_group.h: the ranks of a data-parallel job. Over Open MPI it works under gpurun, bare
// mpirun, srun --mpi=pmix and as one plain process (MPI singleton init); a build without MPI gets a
// one-rank group. No MPI header here: the implementation is private (src/process_group_mpi.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace gpurun::runtime {

// Bytes every rank of the group maps at once (an MPI-3 shared-memory window), for groups whose
// ranks all run on one node. Each rank sees the same bytes at its own address.
class SharedMemory {
 public:
  virtual ~SharedMemory() = default;
  virtual void* data() = 0;
  virtual std::size_t bytes() const = 0;
  // A barrier with the memory synchronisation MPI's shared-memory model asks for: every rank's
  // writes before fence() are visible to every rank after it.
  virtual void fence() = 0;
};

// Plain process memory with a no-op fence: the shared memory of a one-rank group.
std::unique_ptr<SharedMemory> make_private_memory(std::size_t bytes);

// A bounded collective that did not complete in time: a rank died or is stuck. MPI cannot
// cancel it, so the group is unusable afterwards and the process should end.
class CollectiveTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A sum started by ProcessGroup::start_allreduce_sum: test() lets it progress (Open MPI moves a
// non-blocking collective only inside MPI calls) and says whether it is done; wait() finishes it.
// The data must stay put until then.
class PendingSum {
 public:
  virtual ~PendingSum() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks on this node and this rank's position among them (for thread defaults).
  virtual int local_size() const = 0;
  virtual int local_rank() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "single"
  // In-place sum over all ranks. Errors throw std::runtime_error naming the call, rank and host.
  virtual void allreduce_sum(float* data, std::size_t n) = 0;
  virtual void allreduce_sum(double* data, std::size_t n) = 0;
  // The same sum, bounded: throws CollectiveTimeout naming `what`, this rank and host when it has
  // not completed within timeout_s. (The default, for groups that cannot wait, is unbounded.)
  virtual void allreduce_sum_within(float* data, std::size_t n, double timeout_s, const char* what);
  virtual void allreduce_sum_within(double* data, std::size_t n, double timeout_s,
                                    const char* what);
  // The same sum in three stages: within each node (to its first rank), across nodes (their
  // first ranks), then back within each node, so each node sends its gradient over the network
  // once (Horovod's hierarchical allreduce). A different order of additions than allreduce_sum:
  // equal to rounding. The default (one node) is allreduce_sum.
  virtual void allreduce_sum_hierarchical(float* data, std::size_t n) { allreduce_sum(data, n); }
  // The sum of allreduce_sum, started and left to run (MPI_Iallreduce) while the caller computes.
  // The default sums at once and returns a finished one.
  virtual std::unique_ptr<PendingSum> start_allreduce_sum(float* data, std::size_t n);
  virtual std::unique_ptr<PendingSum> start_allreduce_sum(double* data, std::size_t n);
  // In-place sum over all ranks of bfloat16 values (each a float's upper 16 bits): half the bytes
  // of a float sum, each addition made in float and rounded back to nearest even, the same bits
  // on every rank. The default sums in float and rounds once at the end.
  virtual void allreduce_sum_bf16(std::uint16_t* data, std::size_t n);
  // The same, started and left to run (as start_allreduce_sum).
  virtual std::unique_ptr<PendingSum> start_allreduce_sum_bf16(std::uint16_t* data, std::size_t n);
  virtual int nodes() const { return 1; }  // the nodes allreduce_sum_hierarchical sees
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Collective (every rank, the same size): `bytes` of uninitialised memory all ranks share, or
  // nullptr with the reason in why_not when the ranks span more than one node, the node lacks
  // the room, or the group cannot share memory. A one-rank group gets plain memory.
  virtual std::unique_ptr<SharedMemory> allocate_shared(std::size_t bytes, std::string& why_not);
};

// After an error on this rank: when MPI runs with more than one rank, MPI_Abort the job (the
// other ranks may be waiting in a collective this rank will never join, and MPI_Finalize would
// wait for them); otherwise returns.
void abort_job_if_parallel(int code);

// An error every rank of the group holds, with the same message (agree_on_errors threw it on each):
// rank 0 says it once and every rank returns from main, without MPI_Abort (no rank waits for
// another) and without one copy of the message per rank.
class GroupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collective: every rank calls it, with what it caught ("" for nothing), after a part of the
// program that may fail on some ranks only and that holds no collective itself (reading data,
// checking a configuration, rank 0 reading a checkpoint). Returns when no rank failed; otherwise
// throws GroupError on every rank: the message of the lowest failed rank, prefixed with "rank R
// of N on HOST: " (and how many others failed) unless every rank failed.
void agree_on_errors(ProcessGroup& pg, const std::string& error);
// Runs `part` on this rank and agrees on its outcome as agree_on_errors does: what it throws
// (any std::exception) becomes a GroupError on every rank.
void run_agreed(ProcessGroup& pg, const std::function<void()>& part);

struct ProcessGroupOptions {
  // Where Open MPI backs shared-memory windows (OMPI_MCA_osc_sm_backing_directory, read at the
  // program's edge: environment.h): allocate_shared() checks its free room first.
  std::string shm_dir = "/dev/shm";
  // This rank's node (gpurun's NODE_RANK, read at the edge): what allreduce_sum_hierarchical
  // groups by; -1: the ranks MPI finds sharing memory (MPI_COMM_TYPE_SHARED).
  int node_index = -1;
};

// The MPI group when built with MPI (initialising MPI if nobody has), else the single-rank group.
std::unique_ptr<ProcessGroup> make_process_group(const ProcessGroupOptions& options = {});
std::unique_ptr<ProcessGroup> make_single_process_group();

}  // namespace gpurun::runtime

// process_group.h: the ranks of a data-parallel job. Over Open MPI it works under gpurun, bare
// mpirun, srun --mpi=pmix and as one plain process (MPI singleton init); a build without MPI gets a
// one-rank group. No MPI header here: the implementation is private (src/process_group_mpi.cc).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace gpurun::runtime {

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
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

// The MPI group when built with MPI (initialising MPI if nobody has), else the single-rank group.
std::unique_ptr<ProcessGroup> make_process_group();
std::unique_ptr<ProcessGroup> make_single_process_group();

}  // namespace gpurun::runtime

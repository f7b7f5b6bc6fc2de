// process_group_mpi.cc: the Open MPI process group. Every MPI call goes through GPURUN_MPI_CHECK,
// which throws with the expression, file:line, rank and host instead of letting MPI abort the job,
// so main() can report the failure.
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <stdexcept>
#include <string>

#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime {
namespace {

std::string hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

[[noreturn]] void mpi_fail(int rc, const char* expr, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int rank = -1, init = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw std::runtime_error(std::string(expr) + " failed at " + file + ":" + std::to_string(line) +
                           " on rank " + std::to_string(rank) + " (" + hostname() + "): " + msg);
}

#define GPURUN_MPI_CHECK(expr)                                                      \
  do {                                                                              \
    const int gpurun_rc_ = (expr);                                                  \
    if (gpurun_rc_ != MPI_SUCCESS) mpi_fail(gpurun_rc_, #expr, __FILE__, __LINE__); \
  } while (0)

// MPI counts are int: large buffers are reduced in chunks (ours is 2.77 M floats, one chunk).
constexpr std::size_t kMaxChunk = std::size_t(INT_MAX) / 2;

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup() {
    int init = 0;
    GPURUN_MPI_CHECK(MPI_Initialized(&init));
    if (!init) {
      int provided = 0;
      // FUNNELED: only the main thread calls MPI; OpenBLAS threads never do.
      GPURUN_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      owns_ = true;
    }
    GPURUN_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    GPURUN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    GPURUN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    MPI_Comm local;
    GPURUN_MPI_CHECK(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
    GPURUN_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
    GPURUN_MPI_CHECK(MPI_Comm_size(local, &local_size_));
    MPI_Comm_free(&local);
  }
  ~MpiProcessGroup() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (owns_ && !fin) MPI_Finalize();  // errors here cannot be reported; never throw
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }

  void allreduce_sum(float* data, std::size_t n) override {
    if (size_ == 1) return;
    for (std::size_t off = 0; off < n; off += kMaxChunk) {
      const int c = int(std::min(kMaxChunk, n - off));
      GPURUN_MPI_CHECK(
          MPI_Allreduce(MPI_IN_PLACE, data + off, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
  }
  void allreduce_sum(double* data, std::size_t n) override {
    if (size_ == 1) return;
    for (std::size_t off = 0; off < n; off += kMaxChunk) {
      const int c = int(std::min(kMaxChunk, n - off));
      GPURUN_MPI_CHECK(
          MPI_Allreduce(MPI_IN_PLACE, data + off, c, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    }
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    if (size_ == 1) return;
    char* p = static_cast<char*>(data);
    for (std::size_t off = 0; off < bytes; off += kMaxChunk) {
      const int c = int(std::min(kMaxChunk, bytes - off));
      GPURUN_MPI_CHECK(MPI_Bcast(p + off, c, MPI_BYTE, root, MPI_COMM_WORLD));
    }
  }
  void barrier() override { GPURUN_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

 private:
  bool owns_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_process_group() {
  return std::make_unique<MpiProcessGroup>();
}

}  // namespace gpurun::runtime

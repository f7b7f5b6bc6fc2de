// process_group_mpi.cc: the Open MPI process group. Every MPI call goes through GPURUN_MPI_CHECK,
// which throws with the expression, file:line, rank and host instead of letting MPI abort the job,
// so main() can report the failure.
#include <mpi.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpurun/common/posix.h"
#include "gpurun/runtime/process_group.h"
#include "group/bf16.h"

namespace gpurun::runtime {
namespace {

[[noreturn]] void mpi_fail(int rc, const char* expr, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int rank = -1, init = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw std::runtime_error(std::string(expr) + " failed at " + file + ":" + std::to_string(line) +
                           " on rank " + std::to_string(rank) + " (" + common::hostname() +
                           "): " + msg);
}

#define GPURUN_MPI_CHECK(expr)                                                      \
  do {                                                                              \
    const int gpurun_rc_ = (expr);                                                  \
    if (gpurun_rc_ != MPI_SUCCESS) mpi_fail(gpurun_rc_, #expr, __FILE__, __LINE__); \
  } while (0)

// MPI counts are int: large buffers are reduced in chunks (ours is 2.77 M floats, one chunk).
constexpr std::size_t kMaxChunk = std::size_t(INT_MAX) / 2;

// MPI_Op for ProcessGroup::allreduce_sum_bf16: inout += in, in float, rounded back.
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}

// One MPI_Iallreduce per chunk of kMaxChunk floats.
class MpiPendingSum final : public PendingSum {
 public:
  explicit MpiPendingSum(std::vector<MPI_Request> reqs) : reqs_(std::move(reqs)) {}
  ~MpiPendingSum() override {
    if (!reqs_.empty()) MPI_Waitall(int(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
  }
  bool test() override {
    int done = 1;
    if (!reqs_.empty())
      check(MPI_Testall(int(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall",
            __LINE__);
    if (done) reqs_.clear();
    return done != 0;
  }
  void wait() override {
    if (!reqs_.empty())
      check(MPI_Waitall(int(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall",
            __LINE__);
    reqs_.clear();
  }

 private:
  // A failed test or wait ends the requests' story: the destructor must not wait for them again
  // (it could block this rank before it reaches abort_job_if_parallel).
  void check(int rc, const char* call, int line) {
    if (rc == MPI_SUCCESS) return;
    reqs_.clear();
    mpi_fail(rc, call, __FILE__, line);
  }
  std::vector<MPI_Request> reqs_;
};

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup(std::string shm_dir, int node_index) : shm_dir_(std::move(shm_dir)) {
    int init = 0;
    GPURUN_MPI_CHECK(MPI_Initialized(&init));
    if (!init) {
      // Started alone (no mpirun, no srun), this process is an MPI singleton, for which Open MPI
      // would start a daemon (orted) to serve MPI_Comm_spawn, which the runtime never calls.
      // Without it a run starts with nothing to fail: in CI two singletons started at once in
      // two network namespaces once failed to start theirs ("Unable to start a daemon on the
      // local node"). A launched process ignores the setting; a value the user set stands.
      ::setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
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
    GPURUN_MPI_CHECK(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
    local_ = local;
    make_hierarchy(node_index);
    GPURUN_MPI_CHECK(MPI_Op_create(sum_bf16, 1, &bf16_sum_));
  }
  ~MpiProcessGroup() override {
    int fin = 0;
    MPI_Finalized(&fin);
    // While an exception unwinds, main() reports it and aborts the job (abort_job_if_parallel):
    // MPI_Finalize here could wait forever for ranks stuck in a collective.
    if (!fin && size_ > 1 && std::uncaught_exceptions() > 0) return;
    if (!fin && local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
    if (!fin && node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
    if (!fin && leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
    if (!fin && bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
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
  void allreduce_sum_bf16(std::uint16_t* data, std::size_t n) override {
    if (size_ == 1) return;
    for (std::size_t off = 0; off < n; off += kMaxChunk) {
      const int c = int(std::min(kMaxChunk, n - off));
      GPURUN_MPI_CHECK(
          MPI_Allreduce(MPI_IN_PLACE, data + off, c, MPI_UINT16_T, bf16_sum_, MPI_COMM_WORLD));
    }
  }
  void allreduce_sum_within(float* data, std::size_t n, double timeout_s,
                            const char* what) override {
    sum_within(data, n, MPI_FLOAT, "floats", timeout_s, what);
  }
  void allreduce_sum_within(double* data, std::size_t n, double timeout_s,
                            const char* what) override {
    sum_within(data, n, MPI_DOUBLE, "doubles", timeout_s, what);
  }
  int nodes() const override { return nodes_; }
  std::unique_ptr<PendingSum> start_allreduce_sum(float* data, std::size_t n) override {
    return start_sum(data, n, MPI_FLOAT, MPI_SUM);
  }
  std::unique_ptr<PendingSum> start_allreduce_sum(double* data, std::size_t n) override {
    return start_sum(data, n, MPI_DOUBLE, MPI_SUM);
  }
  std::unique_ptr<PendingSum> start_allreduce_sum_bf16(std::uint16_t* data,
                                                       std::size_t n) override {
    return start_sum(data, n, MPI_UINT16_T, bf16_sum_);
  }
  void allreduce_sum_hierarchical(float* data, std::size_t n) override {
    if (nodes_ <= 1 || nodes_ == size_) return allreduce_sum(data, n);  // nothing to group
    int node_rank = 0;
    GPURUN_MPI_CHECK(MPI_Comm_rank(node_, &node_rank));
    for (std::size_t off = 0; off < n; off += kMaxChunk) {
      const int c = int(std::min(kMaxChunk, n - off));
      float* p = data + off;
      GPURUN_MPI_CHECK(
          MPI_Reduce(node_rank == 0 ? MPI_IN_PLACE : p, p, c, MPI_FLOAT, MPI_SUM, 0, node_));
      if (leaders_ != MPI_COMM_NULL)
        GPURUN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, c, MPI_FLOAT, MPI_SUM, leaders_));
      GPURUN_MPI_CHECK(MPI_Bcast(p, c, MPI_FLOAT, 0, node_));
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

  std::unique_ptr<SharedMemory> allocate_shared(std::size_t bytes, std::string& why_not) override {
    if (size_ == 1) return make_private_memory(bytes);
    if (local_size_ != size_) {  // the same answer on every rank
      why_not = "the " + std::to_string(size_) + " ranks span several nodes (" +
                std::to_string(local_size_) + " on " + common::hostname() + ")";
      return nullptr;
    }
    // Open MPI backs the window with a file in osc_sm_backing_directory (/dev/shm by default).
    // Touching pages a full tmpfs cannot provide is a SIGBUS, and containers often get a 64 MiB
    // /dev/shm: check the room first, and agree on the answer.
    const std::string& dir = shm_dir_;
    struct statvfs st {};
    int ok = 1;
    unsigned long long avail = 0;
    if (::statvfs(dir.c_str(), &st) == 0) {
      avail = (unsigned long long)st.f_bavail * st.f_frsize;
      ok = avail >= bytes + bytes / 8 + (1u << 20) ? 1 : 0;
    }
    GPURUN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, local_));
    if (!ok) {
      why_not = dir + " has " + std::to_string(avail >> 20) + " MiB free; the exchange needs " +
                std::to_string((bytes >> 20) + 1) + " MiB (OMPI_MCA_osc_sm_backing_directory " +
                "picks another directory)";
      return nullptr;
    }
    return std::make_unique<MpiSharedMemory>(local_, bytes);
  }

 private:
  // One MPI_Iallreduce per chunk of kMaxChunk elements, left to run.
  template <typename T>
  std::unique_ptr<PendingSum> start_sum(T* data, std::size_t n, MPI_Datatype type, MPI_Op op) {
    std::vector<MPI_Request> reqs;
    for (std::size_t off = 0; size_ > 1 && off < n; off += kMaxChunk) {
      const int c = int(std::min(kMaxChunk, n - off));
      reqs.push_back(MPI_REQUEST_NULL);
      GPURUN_MPI_CHECK(
          MPI_Iallreduce(MPI_IN_PLACE, data + off, c, type, op, MPI_COMM_WORLD, &reqs.back()));
    }
    return std::make_unique<MpiPendingSum>(std::move(reqs));
  }
  // MPI_Iallreduce polled against a deadline: spin briefly (a step's sum takes milliseconds),
  // then sleep between tests so a stuck peer costs no CPU.
  template <typename T>
  void sum_within(T* data, std::size_t n, MPI_Datatype type, const char* unit, double timeout_s,
                  const char* what) {
    if (size_ == 1) return;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (std::size_t off = 0; off < n; off += kMaxChunk) {
      const int c = int(std::min(kMaxChunk, n - off));
      MPI_Request req = MPI_REQUEST_NULL;
      GPURUN_MPI_CHECK(
          MPI_Iallreduce(MPI_IN_PLACE, data + off, c, type, MPI_SUM, MPI_COMM_WORLD, &req));
      for (int spins = 0;; ++spins) {
        int done = 0;
        GPURUN_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) break;
        if (std::chrono::steady_clock::now() >= deadline) {
          char secs[32];
          std::snprintf(secs, sizeof secs, "%.1f", timeout_s);
          throw CollectiveTimeout(std::string("MPI_Allreduce of ") + std::to_string(n) + " " +
                                  unit + " (" + what + ") did not complete within the " +
                                  "communication timeout of " + secs + " s on rank " +
                                  std::to_string(rank_) + " (" + common::hostname() + ") of " +
                                  std::to_string(size_) + " ranks; a peer died or is stuck");
        }
        if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  // One window: rank 0 allocates all of it, every rank maps rank 0's segment (so the layout is
  // the same for all). Nobody writes it here: a page lands on the NUMA node of the rank that
  // first touches it, which the trainer arranges to be the rank that writes it.
  class MpiSharedMemory final : public SharedMemory {
   public:
    MpiSharedMemory(MPI_Comm comm, std::size_t bytes) : comm_(comm), bytes_(bytes) {
      int rank = 0;
      GPURUN_MPI_CHECK(MPI_Comm_rank(comm_, &rank));
      void* mine = nullptr;
      const MPI_Aint size = rank == 0 ? MPI_Aint(bytes) : 0;
      GPURUN_MPI_CHECK(MPI_Win_allocate_shared(size, 1, MPI_INFO_NULL, comm_, &mine, &win_));
      MPI_Aint got = 0;
      int disp = 0;
      GPURUN_MPI_CHECK(MPI_Win_shared_query(win_, 0, &got, &disp, &data_));
      if (std::size_t(got) < bytes) {
        throw std::runtime_error("MPI_Win_shared_query: rank 0's segment has " +
                                 std::to_string(got) + " bytes, asked for " +
                                 std::to_string(bytes));
      }
      // Passive-target epoch for the window's lifetime: MPI_Win_sync needs one.
      GPURUN_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
    }
    ~MpiSharedMemory() override {
      // MPI_Win_free is collective: while an exception unwinds this rank the others may never
      // get there, so leave the window to MPI_Finalize/exit rather than hang.
      if (std::uncaught_exceptions() > 0) return;
      MPI_Win_unlock_all(win_);
      MPI_Win_free(&win_);
    }
    void* data() override { return data_; }
    std::size_t bytes() const override { return bytes_; }
    void fence() override {
      GPURUN_MPI_CHECK(MPI_Win_sync(win_));
      GPURUN_MPI_CHECK(MPI_Barrier(comm_));
      GPURUN_MPI_CHECK(MPI_Win_sync(win_));
    }

   private:
    MPI_Comm comm_;
    std::size_t bytes_;
    MPI_Win win_ = MPI_WIN_NULL;
    void* data_ = nullptr;
  };

  // The hierarchical allreduce's communicators (collective, at construction): node_ groups the
  // ranks of a node (gpurun's NODE_RANK, else MPI's shared-memory domain), leaders_ holds each
  // node's first rank (MPI_COMM_NULL elsewhere).
  void make_hierarchy(int node_index) {
    if (node_index >= 0) {
      GPURUN_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, node_index, rank_, &node_));
    } else {
      GPURUN_MPI_CHECK(MPI_Comm_dup(local_, &node_));
    }
    GPURUN_MPI_CHECK(MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN));
    int node_rank = 0;
    GPURUN_MPI_CHECK(MPI_Comm_rank(node_, &node_rank));
    GPURUN_MPI_CHECK(
        MPI_Comm_split(MPI_COMM_WORLD, node_rank == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders_));
    int leader = node_rank == 0 ? 1 : 0;
    GPURUN_MPI_CHECK(MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (leaders_ != MPI_COMM_NULL)
      GPURUN_MPI_CHECK(MPI_Comm_set_errhandler(leaders_, MPI_ERRORS_RETURN));
  }

  std::string shm_dir_;
  bool owns_ = false;
  MPI_Comm local_ = MPI_COMM_NULL;  // the ranks on this node
  MPI_Comm node_ = MPI_COMM_NULL, leaders_ = MPI_COMM_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;  // allreduce_sum_bf16's
  int nodes_ = 1;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_process_group(const ProcessGroupOptions& options) {
  return std::make_unique<MpiProcessGroup>(options.shm_dir, options.node_index);
}

void abort_job_if_parallel(int code) {
  int init = 0, fin = 0, size = 1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace gpurun::runtime

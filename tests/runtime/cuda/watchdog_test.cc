// watchdog_test.cc: the NCCL watchdog without MPI, so it runs wherever a GPU is (also from a
// prebuilt bundle on a machine with no MPI): a forked second "rank" receives the NCCL unique id
// over a socket and then never joins the communicator. Rank 0 must get an exception within
// --comm-timeout (plus slack) whose message names rank 0 and this host, instead of hanging.
// The child never touches CUDA (it was forked after the parent initialised it). Exits 77 (skipped)
// without a CUDA device. The mpirun twin is GpuCollectives.WatchdogFailsWhenARankNeverJoins
// (collectives_test).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "gpu_test_util.h"
#include "gpurun/runtime/process_group.h"
#include "nccl_comm.h"

namespace {

// Two ranks joined by a socketpair; only broadcast is needed by NcclComm's constructor.
class PairGroup final : public gpurun::runtime::ProcessGroup {
 public:
  PairGroup(int rank, int fd) : rank_(rank), fd_(fd) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  int local_size() const override { return 2; }
  int local_rank() const override { return rank_; }
  std::string backend() const override { return "socketpair"; }
  void allreduce_sum(float*, std::size_t) override { unsupported(); }
  void allreduce_sum(double*, std::size_t) override { unsupported(); }
  void broadcast(void* data, std::size_t bytes, int root) override {
    char* p = static_cast<char*>(data);
    for (std::size_t off = 0; off < bytes;) {
      const ssize_t n =
          rank_ == root ? ::write(fd_, p + off, bytes - off) : ::read(fd_, p + off, bytes - off);
      if (n <= 0) throw std::runtime_error("PairGroup: socket closed");
      off += std::size_t(n);
    }
  }
  void barrier() override { unsupported(); }

 private:
  [[noreturn]] static void unsupported() { throw std::logic_error("PairGroup: not needed"); }
  int rank_, fd_;
};

TEST(NcclWatchdog, FailsWithinTimeoutWhenARankNeverJoins) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  constexpr double kTimeout = 3.0;
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rank 1: take the id, then stay away from the communicator until rank 0 has given up.
    ::close(fds[0]);
    PairGroup pg(1, fds[1]);
    ncclUniqueId id;
    try {
      pg.broadcast(&id, sizeof id, 0);
    } catch (...) {
      ::_exit(2);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTimeout));
    ::_exit(0);
  }
  ::close(fds[1]);
  PairGroup pg(0, fds[0]);
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    gpurun::runtime::cuda::NcclComm comm(pg, kTimeout);
    ADD_FAILURE() << "NCCL init succeeded although rank 1 never joined";
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("watchdog after %.2f s: %s\n", took, msg.c_str());
  EXPECT_LT(took, kTimeout + 5.0) << msg;
  EXPECT_GE(took, 0.9 * kTimeout) << msg;
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  EXPECT_NE(msg.find(host), std::string::npos) << msg;
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(fds[0]);
}

}  // namespace

// process_group_single.cc: the one-rank group: collectives are identities.
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "gpurun/runtime/process_group.h"
#include "group/bf16.h"

namespace gpurun::runtime {
namespace {
class PrivateMemory final : public SharedMemory {
 public:
  explicit PrivateMemory(std::size_t bytes) : bytes_(bytes) {
    // 64-byte aligned (cache lines, AVX-512 loads); aligned_alloc wants a multiple of it.
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, rounded == 0 ? 64 : rounded);
  }
  ~PrivateMemory() override { std::free(data_); }
  void* data() override { return data_; }
  std::size_t bytes() const override { return bytes_; }
  void fence() override {}

 private:
  std::size_t bytes_;
  void* data_;
};

class SingleProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "single"; }
  void allreduce_sum(float*, std::size_t) override {}
  void allreduce_sum(double*, std::size_t) override {}
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
};
}  // namespace

std::unique_ptr<SharedMemory> make_private_memory(std::size_t bytes) {
  return std::make_unique<PrivateMemory>(bytes);
}

namespace {
class DoneSum final : public PendingSum {
 public:
  bool test() override { return true; }
  void wait() override {}
};
}  // namespace

std::unique_ptr<PendingSum> ProcessGroup::start_allreduce_sum(float* data, std::size_t n) {
  allreduce_sum(data, n);
  return std::make_unique<DoneSum>();
}

std::unique_ptr<PendingSum> ProcessGroup::start_allreduce_sum(double* data, std::size_t n) {
  allreduce_sum(data, n);
  return std::make_unique<DoneSum>();
}

std::unique_ptr<PendingSum> ProcessGroup::start_allreduce_sum_bf16(std::uint16_t* data,
                                                                   std::size_t n) {
  allreduce_sum_bf16(data, n);
  return std::make_unique<DoneSum>();
}

void ProcessGroup::allreduce_sum_bf16(std::uint16_t* data, std::size_t n) {
  if (size() == 1) return;
  std::vector<float> sum(n);
  for (std::size_t i = 0; i < n; ++i) sum[i] = from_bf16(data[i]);
  allreduce_sum(sum.data(), n);
  for (std::size_t i = 0; i < n; ++i) data[i] = to_bf16(sum[i]);
}

void ProcessGroup::allreduce_sum_within(float* data, std::size_t n, double, const char*) {
  allreduce_sum(data, n);
}

void ProcessGroup::allreduce_sum_within(double* data, std::size_t n, double, const char*) {
  allreduce_sum(data, n);
}

std::unique_ptr<SharedMemory> ProcessGroup::allocate_shared(std::size_t bytes,
                                                            std::string& why_not) {
  if (size() == 1) return make_private_memory(bytes);
  why_not = "this " + backend() + " group cannot share memory";
  return nullptr;
}

std::unique_ptr<ProcessGroup> make_single_process_group() {
  return std::make_unique<SingleProcessGroup>();
}

#ifndef GPURUN_HAVE_MPI
std::unique_ptr<ProcessGroup> make_process_group(const ProcessGroupOptions&) {
  return make_single_process_group();
}
void abort_job_if_parallel(int) {}
#endif

}  // namespace gpurun::runtime

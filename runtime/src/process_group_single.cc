// process_group_single.cc: the one-rank group: collectives are identities.
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime {
namespace {
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

std::unique_ptr<ProcessGroup> make_single_process_group() {
  return std::make_unique<SingleProcessGroup>();
}

#ifndef GPURUN_HAVE_MPI
std::unique_ptr<ProcessGroup> make_process_group() {
  return make_single_process_group();
}
#endif

}  // namespace gpurun::runtime

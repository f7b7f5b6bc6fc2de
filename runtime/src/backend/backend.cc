// backend.cc: make_backend(), the one place a device is chosen (backend.h).
#include "gpurun/runtime/backend.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/backends.h"
#include "data/sampler.h"
#include "gpurun/runtime/process_group.h"

namespace gpurun::runtime {

const char* exchange_name(Exchange e) {
  switch (e) {
    case Exchange::kAuto:
      return "auto";
    case Exchange::kAllreduce:
      return "allreduce";
    case Exchange::kShared:
      return "shared";
    case Exchange::kHierarchical:
      return "hierarchical";
  }
  return "?";
}

// Only a backend that overlaps its syncs is handed SyncAt::kEpochEnd (trainer.cc).
Progress Backend::land_epoch_end() {
  throw std::logic_error("land_epoch_end: this backend does not overlap its syncs");
}

Evaluation Backend::evaluate_epoch_end(int) {
  throw std::logic_error("evaluate_epoch_end: this backend does not overlap its syncs");
}

bool cuda_available() noexcept {
#if GPURUN_HAVE_CUDA
  return cuda_device_usable();
#else
  return false;
#endif
}

namespace {

// The messages name the setting, not a program's flag: a program maps them to its own options.
void check(const BackendConfig& cfg, const Dataset& data, int world) {
  const auto fail = [](const std::string& what) {
    throw std::invalid_argument("backend configuration: " + what);
  };
  if (cfg.batch_per_rank < 1) {
    fail("the batch size per rank must be >= 1, got " + std::to_string(cfg.batch_per_rank));
  }
  if (cfg.eval_batch < 1) {
    fail("the evaluation batch size must be >= 1, got " + std::to_string(cfg.eval_batch));
  }
  // The sampler's own check, before a backend sizes its buffers by the batch.
  steps_per_epoch(data.train.count, world, cfg.batch_per_rank);
  if (!(cfg.momentum >= 0.0f)) {  // as torch.optim.SGD: negative (or NaN) is refused
    fail("the momentum must be >= 0, got " + std::to_string(cfg.momentum));
  }
  if (!(cfg.weight_decay >= 0.0f)) {
    fail("the weight decay must be >= 0, got " + std::to_string(cfg.weight_decay));
  }
}

// --local-sgd: the CPU path's, and nothing summed each step for the other options to shape.
void check_local_sgd(const BackendOptions& options) {
  const CpuOptions& c = options.cpu;
  if (c.local_sgd_bf16 && c.local_sgd == 0)
    throw std::invalid_argument("--local-sgd-bf16 is how local SGD's averages travel: give "
                                "--local-sgd H too");
  if (c.local_sgd_overlap && c.local_sgd == 0)
    throw std::invalid_argument(
        "--local-sgd-overlap is how local SGD's averages travel: give "
        "--local-sgd H too");
  if (c.local_sgd == 0) return;
  if (c.local_sgd < 0)
    throw std::invalid_argument(
        "--local-sgd (steps between averages) must be >= 1, or 0 for none; got " +
        std::to_string(c.local_sgd));
  if (options.device == Device::kCuda)
    throw std::invalid_argument(
        "--local-sgd is the CPU path's (runtime/src/cpu/model_average.h); the GPU path "
        "allreduces the gradient every step with NCCL: give --device cpu, or no --local-sgd");
  const char* clash = c.powersgd_rank > 0                     ? "--grad-compression"
                      : c.bucket_floats > 0                   ? "--bucket-mb"
                      : c.exchange == Exchange::kHierarchical ? "--exchange hierarchical"
                                                              : nullptr;
  if (clash)
    throw std::invalid_argument(
        std::string("--local-sgd averages the parameters every few steps and sums no gradient "
                    "across ranks, so it does not go with ") +
        clash);
}

}  // namespace

int eval_batch_for(int eval_batch, const Dataset& data) {
  return int(
      std::min<std::size_t>(std::size_t(eval_batch), std::max<std::size_t>(1, data.test.count)));
}

std::unique_ptr<Backend> make_backend(ProcessGroup& pg, const ModelSpec& model, const Dataset& data,
                                      const BackendConfig& cfg, const BackendOptions& options,
                                      std::ostream& log) {
  // What every rank can check before the first collective, agreed on, so that a bad
  // configuration is one error on every rank rather than an abort.
  run_agreed(pg, [&] {
    check(cfg, data, pg.size());
    // The data is one channel of rows x cols (dataset.h) in `classes` classes.
    const Shape in{1, data.train.rows, data.train.cols};
    if (!(model.input() == in) || model.output().size() != std::size_t(data.classes)) {
      const Shape m = model.input();
      throw std::invalid_argument("the model takes " + std::to_string(m.c) + "x" +
                                  std::to_string(m.h) + "x" + std::to_string(m.w) + " inputs to " +
                                  std::to_string(model.output().size()) + " outputs; the data " +
                                  data.name + " has 1x" + std::to_string(in.h) + "x" +
                                  std::to_string(in.w) + " images (one channel) in " +
                                  std::to_string(data.classes) + " classes");
    }
    if (options.device == Device::kCuda && options.cpu.powersgd_rank > 0)
      throw std::invalid_argument(
          "--grad-compression powersgd or acp is the CPU path's (runtime/src/cpu/powersgd.h); "
          "the GPU path allreduces the whole gradient with NCCL: give --device cpu, or no "
          "compression");
    check_local_sgd(options);
#if !GPURUN_HAVE_CUDA
    if (options.device == Device::kCuda) {
      throw std::runtime_error(
          "the GPU (device cuda) was asked for, but this program was built without CUDA "
          "(GPURUN_ENABLE_CUDA=OFF): it trains on the CPU only (device cpu or auto)");
    }
#endif
  });
  BackendConfig capped = cfg;
  capped.eval_batch = eval_batch_for(cfg.eval_batch, data);
  if (options.device == Device::kCpu) {
    return make_cpu_backend(pg, model, data, capped, options.cpu, log);
  }
#if GPURUN_HAVE_CUDA
  return make_cuda_backend(pg, model, data, capped, options.cuda, log);
#else
  throw std::logic_error("unreachable: Device::kCuda without CUDA");
#endif
}

}  // namespace gpurun::runtime

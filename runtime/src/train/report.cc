// report.cc: builds the run report with nlohmann::json and writes it atomically (report.h).
#include "gpurun/runtime/report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "gpurun/common/atomic_file.h"
#include "gpurun/kernels/threads.h"

namespace gpurun::runtime {
namespace {

const char* stop_name(StopReason s) {
  switch (s) {
    case StopReason::kFinished:
      return "finished";
    case StopReason::kMaxSteps:
      return "max_steps";
    case StopReason::kSignal:
      return "signal";
  }
  return "?";
}

nlohmann::json run_fields(const TrainConfig& cfg, const ReportContext& ctx) {
  nlohmann::json j;
  j["program"] = ctx.program;
  j["world_size"] = ctx.world_size;
  j["dataset"] = ctx.dataset;
  j["train_examples"] = ctx.train_examples;
  j["test_examples"] = ctx.test_examples;
  j["epochs"] = cfg.epochs;
  j["batch_per_rank"] = cfg.batch_per_rank;
  j["global_batch"] = cfg.batch_per_rank * ctx.world_size;
  j["lr_base"] = cfg.lr;
  j["lr_scaling"] = ctx.lr_scaling;
  j["momentum"] = cfg.momentum;
  j["seed"] = cfg.seed;
  j["threads_per_rank"] = ctx.threads;
  j["backend"] = ctx.process_group;
  j["restart_count"] = ctx.restart_count;
  j["blas"] = kernels::cpu::blas_info();
  j["blas_core"] = kernels::cpu::blas_core();
  return j;
}

// The figures scripts/step_model.py predicts a step time from: per step, the compute, the
// exchange and the bytes each rank hands to collectives across ranks (the backend's figure: the
// whole gradient for an allreduce, NCCL or the host-staged MPI path; PowerSGD's thin matrices;
// none for the shared-memory exchange, which stays in the node, or a single rank).
// gradient_bytes is an uncompressed allreduce's payload whatever the exchange; wire_bytes_per_step
// what this run's exchange and compression would send across nodes a step, for any world size
// (a one-node run's report is enough for the model), and grad_compression which compression.
void add_step_model(nlohmann::json& j, const TrainResult& r) {
  const double steps = double(std::max<std::int64_t>(r.steps_run, 1));
  j["steps_run"] = r.steps_run;
  j["gradient_bytes"] = double(r.param_count) * sizeof(float);
  j["exchange_bytes_per_step"] = r.backend.exchange_bytes_per_step;
  j["wire_bytes_per_step"] = r.backend.wire_bytes_per_step;
  j["grad_compression"] = r.backend.compression;
  j["local_sgd"] = r.backend.local_sgd;
  j["local_sgd_overlap"] = r.backend.local_sgd_overlap;
  j["epoch_ends_overlapped"] = r.epoch_ends_overlapped;
  j["compute_seconds_per_step"] = r.compute_seconds / steps;
  j["exchange_seconds_per_step"] = r.exchange_seconds / steps;
}

void add_result(nlohmann::json& j, const TrainResult& r) {
  j["device"] = r.backend.device;
  j["exchange"] = r.backend.exchange;
  j["workers_per_rank"] = r.backend.workers;
  j["fused_update"] = r.backend.fused_update;
  j["cuda_graph"] = r.backend.graph;
  j["versions"] = r.backend.versions;
  if (r.backend.device == "cpu") j["cpu_kernels"] = r.backend.versions;
  j["epochs_completed"] = r.epochs.size();
  j["lr"] = r.lr_peak;
  j["lr_last"] = r.lr_last ? nlohmann::json(*r.lr_last) : nlohmann::json();
  j["param_count"] = r.param_count;
  j["train_flops_per_example"] = r.train_flops_per_example;
  j["steps_per_epoch"] = r.steps_per_epoch;
  j["global_steps"] = r.global_steps;
  j["seconds_total"] = r.seconds_total;
  j["train_seconds"] = r.train_seconds;
  j["train_cpu_seconds"] = r.train_cpu_seconds;
  nlohmann::json spe = nlohmann::json::array(), acc = nlohmann::json::array(),
                 loss = nlohmann::json::array(), test_loss = nlohmann::json::array();
  for (const EpochStats& e : r.epochs) {
    spe.push_back(e.seconds);
    acc.push_back(e.test_accuracy);
    loss.push_back(e.loss);
    test_loss.push_back(e.test_loss);
  }
  j["seconds_per_epoch"] = spe;
  j["test_accuracy_per_epoch"] = acc;
  j["test_loss_per_epoch"] = test_loss;
  j["loss_per_epoch"] = loss;
  j["images"] = r.images;
  // null, like the training figures, when this run trained nothing (a finished run resumed)
  j["images_per_second"] = r.images > 0 && r.train_seconds > 0
                               ? nlohmann::json(double(r.images) / r.train_seconds)
                               : nlohmann::json(nullptr);
  j["allreduce_seconds"] = r.exchange_seconds;
  j["compute_seconds"] = r.compute_seconds;
  j["kernel_seconds"] = r.kernel_seconds;
  j["host_seconds"] = r.host_seconds;
  j["final_loss"] = r.final_loss ? nlohmann::json(*r.final_loss) : nlohmann::json(nullptr);
  j["train_accuracy"] =
      r.train_accuracy ? nlohmann::json(*r.train_accuracy) : nlohmann::json(nullptr);
  j["test_accuracy"] = r.test_accuracy;
  j["test_loss"] = r.test_loss;
  j["stopped_by"] = stop_name(r.stop);
  if (!r.step_losses.empty()) j["step_losses"] = r.step_losses;  // this rank's (rank 0's)
  j["resumed"] = r.resumed;
  char sum[32];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(r.param_checksum));
  j["param_checksum"] = sum;
  j["params_agree"] = r.params_agree;
}

}  // namespace

void check_report_path(const std::string& path) {
  const auto fail = [&](const std::string& why) {
    throw std::runtime_error("report " + path + ": " + why);
  };
  if (path.empty()) fail("no file name given");
  struct stat st {};
  if (path.back() == '/' || (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)))
    fail("is a directory; give a file name (e.g. " + path + (path.back() == '/' ? "" : "/") +
         "report.json)");
  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("the folder " + folder + " does not exist (create it first)");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    fail("cannot write into the folder " + folder + ": " + std::strerror(errno));
}

void write_report(const std::string& path, const TrainConfig& cfg, const TrainResult& result,
                  const ReportContext& ctx) {
  check_report_path(path);  // the folder may have gone during the run: say it plainly
  nlohmann::json j = run_fields(cfg, ctx);
  add_result(j, result);
  add_step_model(j, result);
  // A reader (summarize.py, a dashboard polling the file) sees the old report or the new one.
  common::write_file_atomic(path, j.dump(2) + "\n", 0644, common::Durability::kNoSync);
}

}  // namespace gpurun::runtime

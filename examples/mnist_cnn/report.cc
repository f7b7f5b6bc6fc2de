// report.cc: builds the report with nlohmann::json and writes it atomically.
#include "report.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "gpurun/kernels/threads.h"

void write_report(const std::string& path, const ReportInput& in) {
  const auto& r = in.result;
  nlohmann::json j;
  j["world_size"] = in.pg.size();
  j["device"] = in.device;
  j["dataset"] = in.data.name;
  j["train_examples"] = in.data.train.count;
  j["test_examples"] = in.data.test.count;
  j["epochs"] = in.cfg.epochs;
  j["epochs_completed"] = r.epochs.size();
  j["batch_per_rank"] = in.cfg.batch_per_rank;
  j["global_batch"] = in.cfg.batch_per_rank * in.pg.size();
  j["lr"] = r.lr_peak;
  j["lr_base"] = in.cfg.lr;
  j["lr_scaling"] = in.lr_scaling;
  j["momentum"] = in.cfg.momentum;
  j["seed"] = in.cfg.seed;
  j["threads_per_rank"] = in.threads;
  j["workers_per_rank"] = r.workers;
  j["fused_update"] = r.fused_update;
  j["exchange"] = gpurun::runtime::exchange_name(r.exchange);
  j["backend"] = in.pg.backend();
  j["blas"] = gpurun::kernels::cpu::blas_info();
  j["blas_core"] = gpurun::kernels::cpu::blas_core();
  j["param_count"] = r.param_count;
  j["steps_per_epoch"] = r.steps_per_epoch;
  j["global_steps"] = r.global_steps;
  j["seconds_total"] = r.seconds_total;
  j["train_seconds"] = r.train_seconds;
  j["train_cpu_seconds"] = r.train_cpu_seconds;
  nlohmann::json spe = nlohmann::json::array(), acc = nlohmann::json::array(),
                 loss = nlohmann::json::array();
  for (const auto& e : r.epochs) {
    spe.push_back(e.seconds);
    acc.push_back(e.test_accuracy);
    loss.push_back(e.loss);
  }
  j["seconds_per_epoch"] = spe;
  j["test_accuracy_per_epoch"] = acc;
  j["loss_per_epoch"] = loss;
  j["images"] = r.images;
  j["images_per_second"] = r.train_seconds > 0 ? double(r.images) / r.train_seconds : 0.0;
  j["allreduce_seconds"] = r.allreduce_seconds;
  j["compute_seconds"] = r.compute_seconds;
  j["final_loss"] = r.final_loss;
  j["train_accuracy"] = r.train_accuracy;
  j["test_accuracy"] = r.test_accuracy;
  j["test_loss"] = r.test_loss;
  j["stopped_by"] = r.stop == gpurun::runtime::StopReason::kFinished   ? "finished"
                    : r.stop == gpurun::runtime::StopReason::kMaxSteps ? "max_steps"
                                                                       : "signal";
  j["resumed"] = r.resumed;
  char sum[32];
  std::snprintf(sum, sizeof sum, "%016llx", (unsigned long long)r.param_checksum);
  j["param_checksum"] = sum;

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error(path + ": cannot write report (" + tmp + ")");
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error(path + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot rename the report into place");
  }
}

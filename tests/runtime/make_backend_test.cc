// make_backend_test.cc: what make_backend refuses before its first collective, as one GroupError
// (process_group.h) that names the problem in the library's own words (BackendConfig's
// settings, the model's and the data's shapes), never an example's command-line flag; and what
// train() refuses of a TrainConfig.
#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <string>

#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/model_spec.h"
#include "gpurun/runtime/process_group.h"
#include "gpurun/runtime/trainer.h"

namespace gpurun::runtime {
namespace {

Dataset tiny(int rows, int cols) {
  Dataset d;
  d.name = "tiny";
  for (Split* s : {&d.train, &d.test}) {
    s->count = 64;
    s->rows = rows;
    s->cols = cols;
    s->pixels.assign(64 * std::size_t(rows) * cols, 0);
    s->labels.assign(64, 1);
  }
  return d;
}

// make_backend's error text, or "" when it made one.
std::string refusal(const ModelSpec& net, const Dataset& data, const BackendConfig& cfg,
                    const BackendOptions& options = {}) {
  auto pg = make_single_process_group();
  std::ostringstream log;
  try {
    make_backend(*pg, net, data, cfg, options, log);
    return "";
  } catch (const GroupError& e) {
    return e.what();
  }
}

TEST(MakeBackend, RefusesAModelThatDoesNotFitTheData) {
  ModelSpec net({1, 28, 28});
  net.add(flatten()).add(dense(10));
  const BackendConfig cfg;
  EXPECT_EQ(refusal(net, tiny(28, 28), cfg), "");
  const std::string small = refusal(net, tiny(20, 20), cfg);
  EXPECT_NE(small.find("the model takes 1x28x28 inputs to 10 outputs"), std::string::npos) << small;
  EXPECT_NE(small.find("tiny has 1x20x20 images (one channel) in 10 classes"), std::string::npos)
      << small;
  ModelSpec rgb({3, 28, 28});
  rgb.add(flatten()).add(dense(10));
  EXPECT_NE(refusal(rgb, tiny(28, 28), cfg).find("3x28x28"), std::string::npos);
  ModelSpec five({1, 28, 28});
  five.add(flatten()).add(dense(5));
  EXPECT_NE(refusal(five, tiny(28, 28), cfg).find("to 5 outputs"), std::string::npos);
}

TEST(MakeBackend, ConfigurationErrorsNameTheSettingNotAFlag) {
  ModelSpec net({1, 28, 28});
  net.add(flatten()).add(dense(10));
  BackendConfig cfg;
  cfg.batch_per_rank = 0;
  EXPECT_EQ(refusal(net, tiny(28, 28), cfg),
            "backend configuration: the batch size per rank must be >= 1, got 0");
  cfg = {};
  cfg.eval_batch = -3;
  EXPECT_EQ(refusal(net, tiny(28, 28), cfg),
            "backend configuration: the evaluation batch size must be >= 1, got -3");
  cfg = {};
  cfg.momentum = -0.5f;
  EXPECT_NE(refusal(net, tiny(28, 28), cfg).find("the momentum must be >= 0"), std::string::npos);
  cfg = {};
  cfg.weight_decay = -1;
  EXPECT_NE(refusal(net, tiny(28, 28), cfg).find("the weight decay must be >= 0"),
            std::string::npos);
}

// The CPU backend's option errors, after the agreed checks (std::invalid_argument on the rank).
TEST(MakeBackend, CpuOptionErrorsNameTheSettingNotAFlag) {
  ModelSpec net({1, 28, 28});
  net.add(flatten()).add(dense(10));
  auto pg = make_single_process_group();
  std::ostringstream log;
  BackendOptions o;
  o.cpu.exchange = Exchange::kShared;
  o.cpu.micro_batch = 16;
  try {
    make_backend(*pg, net, tiny(28, 28), BackendConfig{}, o, log);
    FAIL() << "the shared exchange with micro-batches was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the shared exchange cannot accumulate micro-batches (micro_batch 16)"),
              std::string::npos) << what;
    EXPECT_EQ(what.find("--"), std::string::npos) << what;
  }
}

// train() checks the loop's own settings and names TrainConfig's fields.
std::string train_refusal(const TrainConfig& cfg) {
  ModelSpec net({1, 28, 28});
  net.add(flatten()).add(dense(10));
  const Dataset data = tiny(28, 28);
  auto pg = make_single_process_group();
  std::ostringstream log;
  auto backend = make_backend(*pg, net, data, backend_config(cfg), {}, log);
  try {
    train(*pg, data, net, *backend, cfg, log);
    return "";
  } catch (const GroupError& e) {
    return e.what();
  }
}

TEST(Train, ConfigurationErrorsNameTrainConfigsFieldsNotFlags) {
  TrainConfig cfg;
  cfg.heartbeat_path = "";
  cfg.epochs = 0;
  EXPECT_EQ(train_refusal(cfg), "training configuration: epochs must be >= 1, got 0");
  cfg.epochs = 1;
  cfg.resume = true;
  const std::string resume = train_refusal(cfg);
  EXPECT_NE(resume.find("checkpoint_dir is empty"), std::string::npos) << resume;
  EXPECT_EQ(resume.find("--"), std::string::npos) << resume;
}

TEST(Train, BackendConfigCarriesWhatABackendNeeds) {
  TrainConfig cfg;
  cfg.batch_per_rank = 48;
  cfg.eval_batch = 100;
  cfg.momentum = 0.9f;
  cfg.weight_decay = 5e-4f;
  const BackendConfig b = backend_config(cfg);
  EXPECT_EQ(b.batch_per_rank, 48);
  EXPECT_EQ(b.eval_batch, 100);
  EXPECT_EQ(b.momentum, 0.9f);
  EXPECT_EQ(b.weight_decay, 5e-4f);
}

}  // namespace
}  // namespace gpurun::runtime

// make_backend_test.cc: what make_backend refuses before its first collective, as one GroupError
// (process_group.h) that names the problem in the library's own words (TrainConfig's fields,
// the model's and the data's shapes), never an example's command-line flag.
#include <gtest/gtest.h>

#include <sstream>
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
std::string refusal(const ModelSpec& net, const Dataset& data, const TrainConfig& cfg) {
  auto pg = make_single_process_group();
  std::ostringstream log;
  try {
    make_backend(*pg, net, data, cfg, {}, log);
    return "";
  } catch (const GroupError& e) {
    return e.what();
  }
}

TEST(MakeBackend, RefusesAModelThatDoesNotFitTheData) {
  ModelSpec net({1, 28, 28});
  net.add(flatten()).add(dense(10));
  const TrainConfig cfg;
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

TEST(MakeBackend, ConfigurationErrorsNameTrainConfigsFieldsNotFlags) {
  ModelSpec net({1, 28, 28});
  net.add(flatten()).add(dense(10));
  TrainConfig cfg;
  cfg.epochs = 0;
  const std::string epochs = refusal(net, tiny(28, 28), cfg);
  EXPECT_EQ(epochs, "training configuration: epochs must be >= 1, got 0");
  cfg.epochs = 1;
  cfg.resume = true;
  const std::string resume = refusal(net, tiny(28, 28), cfg);
  EXPECT_NE(resume.find("checkpoint_dir is empty"), std::string::npos) << resume;
  EXPECT_EQ(resume.find("--"), std::string::npos) << resume;
}

}  // namespace
}  // namespace gpurun::runtime

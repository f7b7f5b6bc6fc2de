// train_cli.h: the command line every training example shares (mnist_cnn, lenet): options, the
// device choice, the data, the run over the runtime's one training loop, and the report. An
// example brings only its model. Only train_main() turns errors into exit codes: 0 done (or
// stopped by a signal with a checkpoint), 1 runtime error, 2 bad usage.
#pragma once

#include "gpurun/runtime/model_spec.h"

namespace gpurun::examples {

struct Example {
  const char* program;  // the binary's name, in messages and the report
  const char* summary;  // one line for --help
  // The model for images of shape `input` in `classes` classes.
  runtime::ModelSpec (*model)(runtime::Shape input, int classes);
};

int train_main(int argc, char** argv, const Example& example);

}  // namespace gpurun::examples

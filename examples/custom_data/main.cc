// custom_data: a program of one's own on the gpurun runtime, whole (runtime/README.md shows it):
// a model declared as data, a dataset made in memory, every rank's training through the
// runtime's one loop, output from rank 0 only, checkpoints, and every error said in one line.
//   custom_data [--epochs N] [--images N] [--data DIR] [--checkpoint DIR] [--device cpu|cuda]
//   gpurun -n 2 -- custom_data --checkpoint ckpt      (run it again after a stop: it resumes)
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/dataset.h"
#include "gpurun/runtime/model_spec.h"
#include "gpurun/runtime/process_group.h"
#include "gpurun/runtime/stop_signal.h"
#include "gpurun/runtime/trainer.h"

namespace rt = gpurun::runtime;

namespace {

// The data: 28x28 dark images, each with one bright 6x4 square whose place is its class (0-9).
// Any data set is a Split like this one: pixels (uint8, count x rows x cols) and labels.
rt::Split squares(std::size_t count, unsigned seed) {
  rt::Split s;
  s.count = count;
  s.rows = s.cols = 28;
  s.pixels.assign(count * 784, 0);
  s.labels.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    seed = seed * 1103515245u + 12345u;
    const int c = int((seed >> 16) % 10);
    s.labels[i] = c;
    const int r0 = (c / 5) * 14 + 3, c0 = (c % 5) * 5 + 1;
    for (int y = r0; y < r0 + 6; ++y)
      for (int x = c0; x < c0 + 4; ++x) s.pixels[i * 784 + std::size_t(y * 28 + x)] = 255;
  }
  return s;
}

// A positive count, or an exception that names the option.
int count_arg(const std::string& option, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 1 || v > 10'000'000) {
    throw std::invalid_argument(option + " needs a number from 1 to 10000000");
  }
  return int(v);
}

// The options; throws std::invalid_argument naming a bad one.
void parse(int argc, char** argv, rt::TrainConfig& cfg, rt::BackendOptions& backend,
           std::string& data_dir, int& images) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* value = i + 1 < argc ? argv[++i] : nullptr;
    if (!value) throw std::invalid_argument(a + " needs a value");
    if (a == "--epochs") {
      cfg.epochs = count_arg(a, value);
    } else if (a == "--images") {
      images = count_arg(a, value);
    } else if (a == "--data") {
      data_dir = value;
    } else if (a == "--checkpoint") {
      cfg.checkpoint_dir = value;
      cfg.resume = true;  // continue from DIR's checkpoint when it holds one
    } else if (a == "--device" && (std::string(value) == "cpu" || std::string(value) == "cuda")) {
      backend.device = std::string(value) == "cuda" ? rt::Device::kCuda : rt::Device::kCpu;
    } else {
      throw std::invalid_argument("unknown option or value: " + a + " " + value);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  rt::block_stop_signals();  // first: SIGUSR1/SIGTERM then stop every rank at one step
  rt::TrainConfig cfg;       // heartbeat_path is GPURUN_HEARTBEAT already
  cfg.epochs = 2;
  cfg.batch_per_rank = 32;
  cfg.lr = 0.05f;
  rt::BackendOptions backend_options;  // the CPU, one thread per rank
  std::string data_dir;
  int images = 1024;
  try {
    parse(argc, argv, cfg, backend_options, data_dir, images);
  } catch (const std::invalid_argument& e) {
    std::cerr << "custom_data: " << e.what() << "\n";
    return 2;
  }
  std::unique_ptr<rt::ProcessGroup> pg;
  try {
    // Under gpurun, mpirun or srun: one rank of many (Open MPI); run alone: a group of one.
    pg = rt::make_process_group();
    std::ostream quiet(nullptr);
    std::ostream& out = pg->rank() == 0 ? std::cout : quiet;  // every rank works, rank 0 talks
    rt::Dataset data;
    // Reading files fails on every rank, or on a few: either way every rank gets one GroupError.
    rt::run_agreed(*pg, [&] {
      if (!data_dir.empty()) {
        data = rt::load_mnist_dir(data_dir);  // DIR/{train,t10k}-{images,labels}-idx*-ubyte[.gz]
        return;
      }
      data.name = "squares";
      data.train = squares(std::size_t(images), 1);
      data.test = squares(256, 2);
    });
    rt::ModelSpec net({1, data.train.rows, data.train.cols});  // LeNet, as examples/lenet
    net.add(rt::conv2d(20, 5, rt::Activation::kRelu))
        .add(rt::max_pool2d(2))
        .add(rt::conv2d(50, 5, rt::Activation::kRelu))
        .add(rt::max_pool2d(2))
        .add(rt::flatten())
        .add(rt::dense(500, rt::Activation::kRelu))
        .add(rt::dense(data.classes));
    auto backend = rt::make_backend(*pg, net, data, rt::backend_config(cfg), backend_options, out);
    const rt::TrainResult r = rt::train(*pg, data, net, *backend, cfg, out);
    out << "lenet " << net.param_count() << " parameters, test accuracy " << r.test_accuracy
        << (r.stop == rt::StopReason::kSignal ? " (stopped by a signal)" : "") << std::endl;
    return 0;
  } catch (const rt::GroupError& e) {  // every rank has it: rank 0 says it, all end normally
    if (pg->rank() == 0) std::cerr << "custom_data: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {  // this rank's alone: say it, and stop the other ranks
    std::cerr << "custom_data";
    if (pg) std::cerr << " (rank " << pg->rank() << ")";
    std::cerr << ": error: " << e.what() << std::endl;
    rt::abort_job_if_parallel(1);
    return 1;
  }
}

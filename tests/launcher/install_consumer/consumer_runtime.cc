// consumer_runtime.cc: an outside program on the installed runtime (find_package(gpurun)). It
// declares the LeNet-style model of examples/lenet, trains it for two epochs on a synthetic
// dataset (one bright square per class, no files) with the CPU backend through the runtime's one
// training loop, and checks that it learned; a CUDA backend without a device must refuse clearly.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/model_spec.h"
#include "gpurun/runtime/trainer.h"

namespace rt = gpurun::runtime;

namespace {

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

}  // namespace

int main() {
  rt::ModelSpec net({1, 28, 28});
  net.add(rt::conv2d(20, 5, rt::Activation::kRelu))
      .add(rt::max_pool2d(2))
      .add(rt::conv2d(50, 5, rt::Activation::kRelu))
      .add(rt::max_pool2d(2))
      .add(rt::flatten())
      .add(rt::dense(500, rt::Activation::kRelu))
      .add(rt::dense(10));
  rt::Dataset data;
  data.name = "squares";
  data.train = squares(1024, 1);
  data.test = squares(256, 2);
  rt::TrainConfig cfg;
  cfg.epochs = 2;
  cfg.batch_per_rank = 32;
  cfg.lr = 0.05f;
  auto pg = rt::make_single_process_group();
  std::ostringstream log;
  auto backend = rt::make_backend(*pg, net, data, cfg, {}, log);
  const rt::TrainResult r = rt::train(*pg, data, net, *backend, cfg, log);
  std::printf("lenet %zu parameters, test accuracy %.3f\n", net.param_count(), r.test_accuracy);
  if (!rt::cuda_available()) {
    rt::BackendOptions cuda;
    cuda.device = rt::Device::kCuda;
    try {
      rt::make_backend(*pg, net, data, cfg, cuda, log);
      std::cerr << "a CUDA backend was made without a device\n";
      return 1;
    } catch (const std::runtime_error& e) {
      std::printf("cuda: %s\n", e.what());
    }
  }
  return r.test_accuracy >= 0.9 ? 0 : 1;
}

// test_models.h: the networks the runtime tests build: the seed's MNIST CNN and the LeNet-style
// net (as examples/mnist_cnn and examples/lenet declare them), and small nets of each kind whose
// gradients finite differences can check over every parameter.
#pragma once

#include <memory>

#include "cpu/model.h"
#include "gpurun/runtime/model_spec.h"

namespace gpurun::runtime::testing {

inline ModelSpec mnist_cnn_spec(Shape in = {1, 28, 28}, int classes = 10) {
  ModelSpec net(in);
  net.add(conv2d(32, 3, Activation::kRelu)).add(dense(128, Activation::kRelu)).add(dense(classes));
  return net;
}

inline ModelSpec lenet_spec(Shape in = {1, 28, 28}, int classes = 10) {
  ModelSpec net(in);
  net.add(conv2d(6, 5, Activation::kRelu))
      .add(max_pool2d(2))
      .add(conv2d(16, 5, Activation::kRelu))
      .add(max_pool2d(2))
      .add(flatten())
      .add(dense(120, Activation::kRelu))
      .add(dense(84, Activation::kRelu))
      .add(dense(classes));
  return net;
}

inline std::unique_ptr<Model> make_model(const ModelSpec& spec, int max_batch) {
  return std::make_unique<Model>(spec, max_batch);
}

}  // namespace gpurun::runtime::testing

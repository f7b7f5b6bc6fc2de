// lenet: a LeNet-style network, Caffe's LeNet with ReLU (Conv2D 20 5x5 + ReLU -> MaxPool 2 ->
// Conv2D 50 5x5 + ReLU -> MaxPool 2 -> Flatten -> Dense 500 + ReLU -> Dense 10), the runtime's
// second model: the same training loop, backends, options and report as mnist_cnn. Run it as one
// process, under `mpirun -n N`, or under `gpurun -n N --`:
//   build/examples/lenet/lenet --data data/fashion --report lenet.json
#include "train_cli.h"

namespace {

namespace rt = gpurun::runtime;

rt::ModelSpec lenet(rt::Shape input, int classes) {
  rt::ModelSpec net(input);
  net.add(rt::conv2d(20, 5, rt::Activation::kRelu))
      .add(rt::max_pool2d(2))
      .add(rt::conv2d(50, 5, rt::Activation::kRelu))
      .add(rt::max_pool2d(2))
      .add(rt::flatten())
      .add(rt::dense(500, rt::Activation::kRelu))
      .add(rt::dense(classes));
  return net;
}

}  // namespace

int main(int argc, char** argv) {
  return gpurun::examples::train_main(
      argc, argv, {"lenet", "a LeNet-style CNN (conv-pool-conv-pool-dense), data-parallel", lenet});
}

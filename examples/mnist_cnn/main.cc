// mnist_cnn: the MNIST CNN of the Keras benchmark (Conv2D 32 3x3 + ReLU -> Dense 128 + ReLU ->
// Dense 10, softmax cross-entropy, SGD lr 0.2, 8 epochs, 64 images per rank), data-parallel over
// Open MPI on the CPU or with NCCL on GPUs. Run it as one process, under `mpirun -n N`, or under
// `gpurun -n N --`:
//   ./scripts/fetch-data.sh && build/examples/mnist_cnn/mnist_cnn --data data/mnist
#include "train_cli.h"

namespace {

namespace rt = gpurun::runtime;

rt::ModelSpec mnist_cnn(rt::Shape input, int classes) {
  rt::ModelSpec net(input);
  net.add(rt::conv2d(32, 3, rt::Activation::kRelu))
      .add(rt::dense(128, rt::Activation::kRelu))
      .add(rt::dense(classes));
  return net;
}

}  // namespace

int main(int argc, char** argv) {
  return gpurun::examples::train_main(
      argc, argv, {"mnist_cnn", "the Keras MNIST benchmark's CNN, data-parallel", mnist_cnn});
}

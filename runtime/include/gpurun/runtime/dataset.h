// dataset.h: an image-classification split held as uint8 pixels, and the loader for a directory
// in MNIST's layout (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-...).
// Batches are gathered into float [batch, 1, rows, cols] scaled to [0, 1], as the Keras
// benchmark does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpurun::runtime {

struct Split {
  std::size_t count = 0;
  int rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count * rows * cols
  std::vector<std::int32_t> labels;  // count, each in [0, classes)

  std::size_t image_floats() const { return std::size_t(rows) * cols; }
  // x[k] = image indices[k] / 255, y[k] = its label.
  void gather(const std::int32_t* indices, int n, float* x, std::int32_t* y) const;
};

struct Dataset {
  std::string name;  // the directory, as given
  Split train, test;
  int classes = 10;
};

// Loads one split from an images file and a labels file; checks types, dimensions, that the counts
// agree and that labels are < classes. Errors name the file.
Split load_split(const std::string& images_path, const std::string& labels_path, int classes);
// Loads DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or with a .gz suffix.
// A missing directory gets a hint to run scripts/fetch-data.sh.
Dataset load_mnist_dir(const std::string& dir);

}  // namespace gpurun::runtime

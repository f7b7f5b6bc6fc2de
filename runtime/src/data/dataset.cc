// dataset.cc: MNIST-layout directory loading and batch gathering.
#include "gpurun/runtime/dataset.h"

#include <sys/stat.h>

#include <stdexcept>

#include "gpurun/runtime/idx.h"

namespace gpurun::runtime {
namespace {

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string find_file(const std::string& dir, const std::string& base) {
  for (const char* suffix : {"", ".gz"}) {
    const std::string p = dir + "/" + base + suffix;
    if (exists(p)) return p;
  }
  throw IdxError(dir + "/" + base + "[.gz]: not found; run scripts/fetch-data.sh to prepare " +
                 "data/mnist and data/fashion");
}

}  // namespace

void Split::gather(const std::int32_t* indices, int n, float* x, std::int32_t* y) const {
  const std::size_t img = image_floats();
  constexpr float kScale = 1.0f / 255.0f;
  for (int k = 0; k < n; ++k) {
    const std::size_t i = std::size_t(indices[k]);
    const std::uint8_t* src = pixels.data() + i * img;
    float* dst = x + std::size_t(k) * img;
    for (std::size_t p = 0; p < img; ++p) dst[p] = float(src[p]) * kScale;
    y[k] = labels[i];
  }
}

Split load_split(const std::string& images_path, const std::string& labels_path, int classes) {
  IdxArray im = read_idx(images_path);
  IdxArray lb = read_idx(labels_path);
  if (im.type != IdxType::kUint8 || im.dims.size() != 3) {
    throw IdxError(images_path + ": expected uint8 images with 3 dimensions [count, rows, cols], " +
                   "got type 0x" + std::to_string(int(im.type)) + " with " +
                   std::to_string(im.dims.size()) + " dimensions");
  }
  if (lb.type != IdxType::kUint8 || lb.dims.size() != 1) {
    throw IdxError(labels_path + ": expected uint8 labels with 1 dimension, got " +
                   std::to_string(lb.dims.size()) + " dimensions");
  }
  if (im.dims[0] != lb.dims[0]) {
    throw IdxError(images_path + " has " + std::to_string(im.dims[0]) + " images but " +
                   labels_path + " has " + std::to_string(lb.dims[0]) + " labels");
  }
  if (im.dims[0] == 0 || im.dims[1] == 0 || im.dims[2] == 0) {
    throw IdxError(images_path + ": empty (a dimension is 0)");
  }
  Split s;
  s.count = im.dims[0];
  s.rows = int(im.dims[1]);
  s.cols = int(im.dims[2]);
  s.pixels = std::move(im.data);
  s.labels.resize(s.count);
  for (std::size_t i = 0; i < s.count; ++i) {
    if (lb.data[i] >= classes) {
      throw IdxError(labels_path + ": label " + std::to_string(lb.data[i]) + " at position " +
                     std::to_string(i) + " is not < " + std::to_string(classes));
    }
    s.labels[i] = lb.data[i];
  }
  return s;
}

Dataset load_mnist_dir(const std::string& dir) {
  if (!exists(dir)) {
    throw IdxError(dir + ": no such data directory; run scripts/fetch-data.sh to prepare " +
                   "data/mnist and data/fashion");
  }
  Dataset d;
  d.name = dir;
  d.train = load_split(find_file(dir, "train-images-idx3-ubyte"),
                       find_file(dir, "train-labels-idx1-ubyte"), d.classes);
  d.test = load_split(find_file(dir, "t10k-images-idx3-ubyte"),
                      find_file(dir, "t10k-labels-idx1-ubyte"), d.classes);
  if (d.train.rows != d.test.rows || d.train.cols != d.test.cols) {
    throw IdxError(dir + ": train images are " + std::to_string(d.train.rows) + "x" +
                   std::to_string(d.train.cols) + " but test images are " +
                   std::to_string(d.test.rows) + "x" + std::to_string(d.test.cols));
  }
  return d;
}

}  // namespace gpurun::runtime

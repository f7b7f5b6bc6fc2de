// validate.cc: argument checks shared by the ref::, cpu:: (and cuda::) ops. They throw
// std::invalid_argument naming the op and the field so a bad layer shape is caught at setup.
#include <stdexcept>
#include <string>

#include "gpurun/kernels/accuracy.h"
#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/dense.h"
#include "gpurun/kernels/pool2d.h"
#include "gpurun/kernels/sgd.h"
#include "gpurun/kernels/softmax_xent.h"

namespace gpurun::kernels {
namespace {
void positive(const char* op, const char* field, long long v) {
  if (v <= 0) {
    throw std::invalid_argument(std::string(op) + ": " + field + " must be positive, got " +
                                std::to_string(v));
  }
}
}  // namespace

void validate(const Conv2dDesc& d) {
  positive("conv2d", "batch", d.batch);
  positive("conv2d", "in_c", d.in_c);
  positive("conv2d", "in_h", d.in_h);
  positive("conv2d", "in_w", d.in_w);
  positive("conv2d", "out_c", d.out_c);
  positive("conv2d", "k_h", d.k_h);
  positive("conv2d", "k_w", d.k_w);
  positive("conv2d", "stride", d.stride);
  if (d.pad < 0) throw std::invalid_argument("conv2d: pad must be >= 0");
  if (d.in_h + 2 * d.pad < d.k_h || d.in_w + 2 * d.pad < d.k_w) {
    throw std::invalid_argument("conv2d: kernel " + std::to_string(d.k_h) + "x" +
                                std::to_string(d.k_w) + " does not fit the padded input " +
                                std::to_string(d.in_h + 2 * d.pad) + "x" +
                                std::to_string(d.in_w + 2 * d.pad));
  }
}

void validate(const Pool2dDesc& d) {
  positive("max_pool2d", "batch", d.batch);
  positive("max_pool2d", "channels", d.channels);
  positive("max_pool2d", "in_h", d.in_h);
  positive("max_pool2d", "in_w", d.in_w);
  positive("max_pool2d", "size", d.size);
  positive("max_pool2d", "stride", d.stride);
  if (d.in_h < d.size || d.in_w < d.size) {
    throw std::invalid_argument("max_pool2d: window " + std::to_string(d.size) + "x" +
                                std::to_string(d.size) + " does not fit the input " +
                                std::to_string(d.in_h) + "x" + std::to_string(d.in_w));
  }
}

void validate(const DenseDesc& d) {
  positive("dense", "batch", d.batch);
  positive("dense", "in", d.in);
  positive("dense", "out", d.out);
}

void validate(const BiasActDesc& d) {
  positive("bias_act", "outer", d.outer);
  positive("bias_act", "channels", d.channels);
  positive("bias_act", "inner", d.inner);
}

void validate(const SoftmaxXentDesc& d) {
  positive("softmax_xent", "batch", d.batch);
  positive("softmax_xent", "classes", d.classes);
}

void validate(const AccuracyDesc& d) {
  positive("accuracy", "batch", d.batch);
  positive("accuracy", "classes", d.classes);
}

void validate(const SgdDesc& d) {
  if (!(d.lr >= 0.0f)) throw std::invalid_argument("sgd: lr must be >= 0");
  if (!(d.momentum >= 0.0f)) throw std::invalid_argument("sgd: momentum must be >= 0");
  if (!(d.weight_decay >= 0.0f)) throw std::invalid_argument("sgd: weight_decay must be >= 0");
}

}  // namespace gpurun::kernels

// buffer.cc: FloatBuffer's allocation. 64-byte alignment matches a cache line and an AVX-512
// vector, which OpenBLAS and the vectorised loops prefer.
#include "cpu/buffer.h"

#include <cstdlib>
#include <new>
#include <utility>

namespace gpurun::runtime {

FloatBuffer::FloatBuffer(std::size_t n) : size_(n) {
  if (n == 0) return;
  const std::size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (data_ == nullptr) throw std::bad_alloc();
  fill(0.0f);
}

FloatBuffer::~FloatBuffer() {
  std::free(data_);
}

FloatBuffer::FloatBuffer(FloatBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

FloatBuffer& FloatBuffer::operator=(FloatBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void FloatBuffer::fill(float v) {
  for (std::size_t i = 0; i < size_; ++i) data_[i] = v;
}

}  // namespace gpurun::runtime

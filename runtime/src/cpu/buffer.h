// buffer.h: FloatBuffer, a move-only, 64-byte aligned, zero-initialised array of floats. Every
// tensor of the runtime (parameters, gradients, activations, workspaces) lives in one, allocated
// once before training so the step loop allocates nothing.
#pragma once

#include <cstddef>

namespace gpurun::runtime {

class FloatBuffer {
 public:
  FloatBuffer() = default;
  explicit FloatBuffer(std::size_t n);
  ~FloatBuffer();
  FloatBuffer(FloatBuffer&& o) noexcept;
  FloatBuffer& operator=(FloatBuffer&& o) noexcept;
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  std::size_t size() const { return size_; }
  float& operator[](std::size_t i) { return data_[i]; }
  float operator[](std::size_t i) const { return data_[i]; }
  void fill(float v);

 private:
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace gpurun::runtime

// A typed device array for the GPU tests: cudaMalloc'd, filled from and read
// back into std::vector with synchronous copies.
#pragma once

#include <cstddef>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/runtime/cuda_error.hpp"

namespace rig_gpu_test {

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    RIG_CUDA_CHECK(cudaMalloc(&data_, count == 0 ? 1 : count * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) {
    RIG_CUDA_CHECK(
        cudaMemcpy(data_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return static_cast<T*>(data_); }
  std::size_t size() const { return count_; }
  // Waits for the device, then copies everything back.
  std::vector<T> to_host() const {
    RIG_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> out(count_);
    RIG_CUDA_CHECK(cudaMemcpy(out.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  void* data_ = nullptr;
  std::size_t count_;
};

}  // namespace rig_gpu_test

#include "cuda/runtime/device_guard.hpp"

#include <cuda_runtime_api.h>

#include "cuda/runtime/cuda_error.hpp"

namespace rig::cuda {

DeviceGuard::DeviceGuard(int device) {
  RIG_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    RIG_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(previous_);
}

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace rig::cuda

#include "cuda/runtime/pinned_buffer.hpp"

#include <utility>

#include <cuda_runtime_api.h>

#include "cuda/runtime/cuda_error.hpp"

namespace rig::cuda {

PinnedBuffer::PinnedBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  RIG_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  data_ = static_cast<std::byte*>(p);
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace rig::cuda

// Page-locked host memory (RAII, move-only): what asynchronous host <-> device
// copies need to overlap with compute. A data layer fills one while the GPU
// works on the previous batch.
#pragma once

#include <cstddef>
#include <span>

namespace rig::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // `bytes` of page-locked memory, usable by every device (cudaHostAllocPortable).
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace rig::cuda

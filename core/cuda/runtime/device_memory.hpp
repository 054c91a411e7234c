// Device memory: cudaMalloc and CUDA events behind the caching allocator's
// bookkeeping (allocator/device_caching_allocator.hpp), one allocator per
// device, and DeviceBuffer, an RAII block from it.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/allocator/device_caching_allocator.hpp"
#include "cuda/runtime/stream.hpp"

namespace rig::cuda {

// cudaMalloc / cudaFree on one device, and markers that are pooled CUDA events.
class CudaMemorySource final : public DeviceMemorySource {
 public:
  explicit CudaMemorySource(int device) : device_(device) {}
  ~CudaMemorySource() override;
  CudaMemorySource(const CudaMemorySource&) = delete;
  CudaMemorySource& operator=(const CudaMemorySource&) = delete;

  std::byte* allocate(std::size_t bytes) override;
  void release(std::byte* data) noexcept override;
  Marker record(StreamId stream) override;
  bool completed(Marker marker) override;
  void wait(Marker marker) override;
  void release_marker(Marker marker) noexcept override;
  std::optional<backend::DeviceCapacity> capacity() const override;

 private:
  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> spare_events_;  // recorded markers come back here for reuse
};

// The caching allocator of visible device `device`, made on first use and kept
// for the process's life. RIG_ALLOCATOR=system turns caching off, as on the CPU.
DeviceCachingAllocator& device_allocator(int device);

// A block of device memory from its device's caching allocator for work on
// `stream`; given back when destroyed (RAII, move-only).
class DeviceBuffer {
 public:
  DeviceBuffer(std::size_t bytes, const Stream& stream);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* data() const { return block_.data; }
  std::size_t capacity() const { return block_.capacity; }
  StreamId stream() const { return block_.stream; }
  // Notes that work on `stream` (not the allocation stream) uses the buffer:
  // its memory is reused only after that work, as queued when it is freed.
  void record_use(const Stream& stream);

 private:
  void free() noexcept;

  DeviceCachingAllocator* allocator_ = nullptr;  // not owned: device_allocator()'s
  DeviceBlock block_;
  std::vector<StreamId> used_on_;
};

}  // namespace rig::cuda
